"""Plumbing: the results store, sweeps, summaries, spreads, loop flags, cost models, measurement."""
