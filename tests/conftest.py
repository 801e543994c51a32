"""Shared test setup: tiny models on one CPU thread (small ops run fastest, and the suite
never oversubscribes a machine that is also training). The shared helpers live in
``helpers.py`` (``toy_pair`` is re-exported here for the tests that import it from conftest)."""
import torch

from helpers import toy_pair  # noqa: F401

torch.set_num_threads(1)
