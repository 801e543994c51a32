"""Shared test setup: tiny models on one CPU thread (small ops run fastest, and the suite
never oversubscribes a machine that is also training)."""
import torch

torch.set_num_threads(1)
