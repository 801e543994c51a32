"""Studies: each one question of the lab, measured into a store (bench, quality, DFlash 2, ...)."""
