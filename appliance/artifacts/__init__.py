"""Large tool results kept aside: their rows (``store``) and how a read picks a part (``reading``)."""
