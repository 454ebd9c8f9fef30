"""Where spend comes from: the price table now, billing APIs later (one module per source)."""
