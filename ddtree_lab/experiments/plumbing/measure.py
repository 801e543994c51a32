"""One measurement module: device-synced timers, interleaved repeats, live-byte peaks, and the
seeded random trees and prefixes every cost measurement times (``studies.verify_cost``,
``plumbing.costs``, scripts/bench_*.py).

- ``timed(fn, clock) -> (ms, result)``: wall (or thread CPU) time, device-synced at both ends
  (``decode.device_sync``);
- ``median_seconds(fn, repeats, warmup)``: the median of ``repeats`` timed calls;
- ``interleaved(fns, repeats, clock)``: every fn in turn per repeat after one warm-up repeat
  (repeat r of every fn is one pair for ``spread.ratio_columns``);
- ``LiveBytes``: a dispatch-mode counter of live tensor storage over every aten output (views
  counted once per storage, freed when the last tensor dies), its ``peak``;
- ``random_tree(V, budget, seed)`` / ``random_prefix(model, n, seed)``: the same (budget,
  seed) always gives the same tree, so tables with different budget lists share their trees.
"""
from __future__ import annotations

import statistics
import time
import weakref
import zlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ...core.decode import device_sync
from ...core.tree import build_tree, chain_tree

DEPTH_ROWS, PEAKEDNESS = 16, 3.0


def timed(fn, clock=time.perf_counter) -> tuple[float, object]:
    """(milliseconds, result) of ``fn()``, device-synced at both ends (``decode.device_sync``);
    ``clock``: as ``interleaved``'s."""
    device_sync()
    start = clock()
    out = fn()
    device_sync()
    return 1e3 * (clock() - start), out


def median_seconds(fn, repeats: int, warmup: int = 0) -> float:
    """Median seconds of ``repeats`` device-synced calls of ``fn``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn)[0] / 1e3 for _ in range(repeats))


def interleaved(fns: dict, repeats: int, clock=time.perf_counter) -> dict:
    """{name: [ms per repeat]} of every fn, run in turn ``repeats`` times after one warm-up
    repeat, device-synced (``clock``: ``time.perf_counter``, or ``time.thread_time`` for this
    thread's CPU time, which other jobs on a shared machine inflate far less)."""
    times = {name: [] for name in fns}
    for rep in range(repeats + 1):
        for name, fn in fns.items():
            device_sync()
            start = clock()
            fn()
            device_sync()
            if rep:
                times[name].append(1e3 * (clock() - start))
    return times


class LiveBytes(TorchDispatchMode):
    """Peak bytes of tensor storage allocated (and still alive) inside the mode."""

    def __init__(self):
        super().__init__()
        self.refs: dict[int, list] = {}  # storage ptr -> [live tensors, nbytes]
        self.live = self.peak = 0

    def _release(self, ptr):
        entry = self.refs[ptr]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self.refs[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.refs:
                    if any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr
                           for a in tree_leaves((args, kwargs))):
                        continue  # a view or in-place result of an input made outside the mode
                    self.refs[ptr] = [0, t.untyped_storage().nbytes()]
                    self.live += self.refs[ptr][1]
                    self.peak = max(self.peak, self.live)
                self.refs[ptr][0] += 1
                weakref.finalize(t, self._release, ptr)
        return out


def _generator(seed: int, salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}/{salt}".encode()))


def random_tree(vocab_size: int, budget: int, seed: int = 0):
    """A ``build_tree`` tree of ``budget`` nodes over peaked random logits [16, V] (budget 0:
    the root only); the same (budget, seed) always gives the same tree."""
    gen = _generator(seed, f"tree{budget}")
    root = int(torch.randint(vocab_size, (1,), generator=gen))
    if budget == 0:
        return chain_tree(torch.empty(0, dtype=torch.long), root)
    logits = torch.randn(DEPTH_ROWS, vocab_size, generator=gen) * PEAKEDNESS  # [16, V]
    return build_tree(logits, root, budget)


def random_prefix(model, prefix_len: int, seed: int = 0) -> torch.Tensor:
    """[prefix_len] random token ids."""
    return torch.randint(model.config.vocab_size, (prefix_len,), generator=_generator(seed, "prefix"))
