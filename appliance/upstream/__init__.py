"""The egress seam: every byte that leaves the appliance goes through here."""
