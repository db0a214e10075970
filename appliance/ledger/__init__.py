"""Credits, toolkit prices and ceilings, quota windows, reservations, the rate limiter, audit rows."""
