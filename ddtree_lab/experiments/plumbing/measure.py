"""One measurement module: device-synced timers, interleaved repeats, live-byte peaks, and the
seeded random trees and prefixes every cost measurement times (``studies.verify_cost``,
``plumbing.costs``, scripts/bench_*.py).

- ``timed(fn, clock) -> (ms, result)``: wall (or thread CPU) time, device-synced at both ends
  (``decode.device_sync``); ``synced_clock()``: the same wall clock as a bare timer (for
  ``harness.timed_calls``, which times calls it does not make itself);
- ``median_seconds(fn, repeats, warmup)``: the median of ``repeats`` timed calls;
- ``interleaved(fns, repeats, clock)``: every fn in turn per repeat after one warm-up repeat
  (repeat r of every fn is one pair for ``spread.ratio_columns``);
- ``ForwardClock(modules)``: seconds inside each named module's forward calls, per call, by
  forward hooks (a loop timed from outside, as the reference loop ``dflash_generate``, which
  exposes no phase timers on a CPU);
- ``LiveBytes``: a dispatch-mode counter of live tensor storage over every aten output (views
  counted once per storage, freed when the last tensor dies), its ``peak``;
- ``random_tree(V, budget, seed)`` / ``random_prefix(model, n, seed)``: the same (budget,
  seed) always gives the same tree, so tables with different budget lists share their trees.
"""
from __future__ import annotations

import math
import statistics
import time
import weakref
import zlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ...core.decode import device_sync
from ...core.tree import DraftTree, build_tree, chain_tree, tree_depths

DEPTH_ROWS, PEAKEDNESS = 16, 3.0


def synced_clock() -> float:
    """``time.perf_counter`` after the device's queued work (``decode.device_sync``)."""
    device_sync()
    return time.perf_counter()


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


class ForwardClock:
    """``with ForwardClock({"target": model, ...}) as clock``: ``clock.calls[name]`` lists the
    seconds of every forward call of that module inside the block (device-synced at both
    ends, by a pre- and a post-forward hook; the hooks are removed on exit). A module's own
    submodules are not timed apart: one entry per call of the named module.
    methods {name: (object, attribute)}: a method called outside any forward (the drafter's
    ``compute_logits`` on the target's head) timed the same way, by an instance attribute that
    shadows it inside the block (both loops call it through the instance)."""

    def __init__(self, modules: dict, methods: dict | None = None):
        self.modules, self.methods = modules, methods or {}
        self.calls: dict[str, list[float]] = {name: [] for name in (*modules, *self.methods)}
        self._handles: list = []

    def __enter__(self) -> "ForwardClock":
        for name, module in self.modules.items():
            started = []
            self._handles += [module.register_forward_pre_hook(lambda *_, s=started: s.append(synced_clock())),
                              module.register_forward_hook(
                                  lambda *_, s=started, n=name: self.calls[n].append(synced_clock() - s.pop()))]
        for name, (obj, attr) in self.methods.items():
            object.__setattr__(obj, attr, self._timed(name, getattr(obj, attr)))
        return self

    def _timed(self, name: str, method):
        def timed_call(*args, **kwargs):
            start = synced_clock()
            out = method(*args, **kwargs)
            self.calls[name].append(synced_clock() - start)
            return out
        return timed_call

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for obj, attr in self.methods.values():
            object.__delattr__(obj, attr)


def model_clock(target, drafter_model) -> ForwardClock:
    """The clock of a speculative loop's model work, every loop alike (the lab's and
    ``dflash_generate``): "target" and "drafter" forward calls, and "drafter_head" (the
    drafter's ``compute_logits``: its logits on the target's head, outside its forward)."""
    return ForwardClock({"target": target, "drafter": drafter_model},
                        {"drafter_head": (drafter_model, "compute_logits")})


def model_seconds(metrics: dict) -> float:
    """Seconds of a stored row's model work (the sum of its ``model_clock`` entries, kept as
    metrics["forwards"]); NaN for a row stored without them, so a rate over it is NaN too."""
    f = metrics.get("forwards")
    return math.nan if f is None else max(sum(f.values()), 1e-12)


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


TREE_KINDS = ("chain", "star", "deep", "bushy", "random")
KIND_LOGITS = {"deep": (DEPTH_ROWS, 6.0), "bushy": (4, 0.3)}  # (draft rows, logit scale) of build_tree kinds


def tree_of_kind(kind: str, budget: int, vocab: int, gen: torch.Generator, scale: float | None = None) -> DraftTree:
    """The lab's one random-tree factory: ``budget`` draft nodes + the root, drawn from ``gen``,
    one of ``TREE_KINDS``: chain / star / random (every node's parent uniform among the
    earlier ones) by hand; deep (peaked logits, 16 rows) and bushy (flat, 4 rows) by
    ``build_tree`` (``scale``: the logits' scale instead of the kind's). Budget 0: the root."""
    if kind not in TREE_KINDS:
        raise ValueError(f"kind must be one of {TREE_KINDS}, got {kind!r}")
    root = int(torch.randint(vocab, (1,), generator=gen))
    if kind == "chain" or budget == 0:
        return chain_tree(torch.randint(vocab, (budget,), generator=gen), root)
    if kind in ("star", "random"):
        tokens = torch.randint(vocab, (budget,), generator=gen)
        parents = [0 if kind == "star" else int(torch.randint(i, (1,), generator=gen)) for i in range(1, budget + 1)]
        return hand_tree(tokens, root, parents)
    rows, kind_scale = KIND_LOGITS[kind]
    return build_tree(torch.randn(rows, vocab, generator=gen) * (kind_scale if scale is None else scale), root, budget)


def hand_tree(tokens: torch.Tensor, root: int, parents: list[int]) -> DraftTree:
    """The tree of ``tokens`` [N] under ``root`` with ``parents`` (N entries, node ids 0..N)."""
    parents = torch.tensor([-1] + parents)
    return DraftTree(tokens=torch.cat([torch.tensor([root]), tokens]), parents=parents,
                     depths=tree_depths(parents), log_weights=torch.zeros(len(parents), dtype=torch.float64))


def random_tree(vocab_size: int, budget: int, seed: int = 0) -> DraftTree:
    """The timing benches' tree: ``tree_of_kind("deep")`` at scale ``PEAKEDNESS``, seeded by
    (budget, seed): the same (budget, seed) always gives the same tree."""
    return tree_of_kind("deep", budget, vocab_size, _generator(seed, f"tree{budget}"), scale=PEAKEDNESS)


def random_prefix(model, prefix_len: int, seed: int = 0) -> torch.Tensor:
    """[prefix_len] random token ids."""
    return torch.randint(model.config.vocab_size, (prefix_len,), generator=_generator(seed, "prefix"))


def print_row(row: dict) -> None:
    """A measured row on one line, floats to 3 decimals (a bench's ``progress`` callback)."""
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
