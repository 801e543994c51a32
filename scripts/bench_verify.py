"""Cost of exact tree verification on the real-size random-init targets (RESEARCH.md section 4).

GDN target (``build_target("gdn")``: Qwen3.5 stack, 6 GDN + 2 attention layers, float32, one
thread), prefix of 128 random tokens, trees from ``build_tree`` over randn(16, V) * 3 logits,
budgets 1..256. All modes are timed in ONE run, interleaved per repeat (rotating order), from
the same prefilled cache, medians reported:

  verify  ms of ``verify`` in naive / fork / wy, and fork/naive, wy/naive;
  commit  ms of ``commit`` of the deepest root path (worst case for replay) after that verify:
          fork = pick the stored state, wy = replay the path; reported over the mode's verify;
  memory  fork states: sum over GDN layers of record['states'].numel() * itemsize (what fork
          keeps from verify until commit); wy NxN: MEASURED peak of live bytes inside one
          ``gated_delta_wy`` call on the tree (its (N+1)^2 x H decay / A / attention matrices,
          ~32 B * H * (N+1)^2 by a walk through the code; transient, one layer at a time);
          peak nv / fork / wy: MEASURED peak of live tensor bytes allocated during a whole
          verify. Measured = a dispatch-mode counter over every aten output (views counted
          once per storage, freed when the last tensor dies). naive runs the same WY kernel
          on chain parents, so wy's matrices cost naive as much (peak wy == peak nv).

Goals at budget 64: wy <= 1.1x naive, fork <= 2x naive, commit < 10% of a verify (PASS/MISS).
On a MISS, a breakdown times the GDN tree kernels inside verify (conv, recurrence) to say what
dominates. MLA target (``build_target("mla")``): verify ms vs budget over a 1-token decode,
measured both as ``verify`` of a root-only tree and as the stock HF forward of 1 token with a
``DynamicCache``. Results -> data/results/bench_verify.csv.

    PYTHONPATH=. python scripts/bench_verify.py [--quick]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import time
import weakref
from pathlib import Path

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ddtree_lab import adapter, gdn_tree
from ddtree_lab import verify as verify_module
from ddtree_lab.models import build_target
from ddtree_lab.tree import build_tree, chain_tree
from ddtree_lab.verify import GDN_MODES, TreeCache, commit, prefill, verify

PREFIX_LEN, DEPTH_ROWS, PEAKEDNESS = 128, 16, 3.0
BUDGETS = (1, 8, 16, 32, 64, 128, 256)
GOAL_BUDGET = 64
GOALS = (("wy/naive", 1.1), ("fork/naive", 2.0), ("commit/verify fork", 0.1), ("commit/verify wy", 0.1))
OUT = Path(__file__).resolve().parents[1] / "data" / "results" / "bench_verify.csv"


# ----------------------------------------------------------------------------- measuring

def copy_cache(cache: TreeCache) -> TreeCache:
    """A cache to spend on one verify + commit: verify and commit replace dict entries, never
    write tensors in place, so shallow copies of the dicts keep ``cache`` intact."""
    return TreeCache(cache.model_key, cache.length, dict(cache.kv), dict(cache.conv), dict(cache.rec))


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return 1e3 * (time.perf_counter() - start), out


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


def peak_extra_bytes(model, cache, tree, mode) -> int:
    with LiveBytes() as counter:
        verify(model, copy_cache(cache), tree, mode)
    return counter.peak


def wy_kernel_peak_bytes(model, tree) -> int:
    """Peak live bytes inside one gated_delta_wy call with this target's GDN shapes on ``tree``."""
    m = next(iter(adapter.gdn_modules(model).values()))
    n, H, dk, dv = len(tree), m.num_v_heads, m.head_k_dim, m.head_v_dim
    q, k = (torch.nn.functional.normalize(torch.randn(n, H, dk), dim=-1) for _ in range(2))
    v, g, beta, S0 = torch.randn(n, H, dv), -torch.rand(n, H), torch.rand(n, H), torch.randn(H, dk, dv)
    anc = gdn_tree.ancestor_mask(tree.parents)  # a tree buffer, made before verify
    with LiveBytes() as counter:
        gdn_tree.gated_delta_wy(q, k, v, g, beta, tree.parents, S0, anc)
    return counter.peak


def fork_state_bytes(cache) -> int:
    return sum(r["states"].numel() * r["states"].element_size() for r in cache.pending["gdn"].values())


# ----------------------------------------------------------------------------- GDN target

def make_tree(V: int, budget: int, gen: torch.Generator):
    logits = torch.randn(DEPTH_ROWS, V, generator=gen) * PEAKEDNESS  # [16, V]
    return build_tree(logits, int(torch.randint(V, (1,), generator=gen)), budget)


def bench_gdn_budget(model, cache, tree, repeats: int) -> dict:
    """Median verify / commit ms per mode, interleaved (the order rotates every repeat)."""
    path = tree.path_to(int(tree.depths.argmax()))
    times = {m: {"verify": [], "commit": []} for m in GDN_MODES}
    for r in range(repeats + 1):  # repeat 0 warms up
        for mode in GDN_MODES[r % 3:] + GDN_MODES[:r % 3]:
            work = copy_cache(cache)
            t_verify, _ = timed(lambda: verify(model, work, tree, mode))
            t_commit, _ = timed(lambda: commit(model, work, tree, path)) if mode != "naive" else (float("nan"), None)
            if r:
                times[mode]["verify"].append(t_verify)
                times[mode]["commit"].append(t_commit)
    row = {f"{m}_{k}_ms": statistics.median(v) for m, d in times.items() for k, v in d.items()}
    row.update({f"{m}_{k}_min_ms": min(v) for m, d in times.items() for k, v in d.items()})
    work = copy_cache(cache)
    verify(model, work, tree, "fork")
    row["fork_states_bytes"] = fork_state_bytes(work)
    row["wy_kernel_peak_bytes"] = wy_kernel_peak_bytes(model, tree)
    for mode in GDN_MODES:
        row[f"{mode}_peak_extra_bytes"] = peak_extra_bytes(model, cache, tree, mode)
    return row


def breakdown(model, cache, tree, repeats: int) -> dict:
    """ms per verify (and per commit of the deepest path) spent in the GDN tree kernels and in
    the replay, each wrapped with a timer, per mode."""
    targets = [(gdn_tree, "tree_conv"), (gdn_tree, "gated_delta_fork"), (gdn_tree, "gated_delta_wy"),
               (gdn_tree, "gated_delta_chain"), (verify_module, "replay_gdn")]
    spent = {name: 0.0 for _, name in targets}
    saved = [(mod, name, getattr(mod, name)) for mod, name in targets]

    def wrap(fn, name):
        def timed_kernel(*args, **kwargs):
            ms, out = timed(lambda: fn(*args, **kwargs))
            spent[name] += ms
            return out
        return timed_kernel

    def measure(fn) -> dict:  # {"total": ms, kernel: ms inside fn}
        before = dict(spent)
        ms, _ = timed(fn)
        return {"total": ms, **{k: spent[k] - before[k] for k in spent}}

    path, result = tree.path_to(int(tree.depths.argmax())), {}
    try:
        for mod, name, fn in saved:
            setattr(mod, name, wrap(fn, name))
        for mode in GDN_MODES:
            runs = {"verify": [], "commit": []}
            for _ in range(repeats):
                work = copy_cache(cache)
                runs["verify"].append(measure(lambda: verify(model, work, tree, mode)))
                if mode != "naive":
                    runs["commit"].append(measure(lambda: commit(model, work, tree, path)))
            for part, parts in runs.items():
                if parts:
                    result[(mode, part)] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    return result


def run_gdn(repeats: int, gen: torch.Generator) -> list[dict]:
    model = build_target("gdn")
    V = model.config.vocab_size
    cache, _ = prefill(model, torch.randint(V, (PREFIX_LEN,), generator=gen))
    print(f"\nGDN target ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params), prefix {PREFIX_LEN}, "
          f"median of {repeats}, ms")
    print(f"{'budget':>6} {'depth':>5} {'naive':>7} {'fork':>7} {'wy':>7} {'fork/nv':>7} {'wy/nv':>6} "
          f"{'cm fork':>7} {'cm wy':>6} {'cm/vf':>6} {'cm/vw':>6} {'fork states':>11} {'wy NxN':>8} "
          f"{'peak nv':>8} {'peak fork':>9} {'peak wy':>8}")
    rows = []
    for budget in BUDGETS:
        tree = make_tree(V, budget, gen)
        r = {"arch": "gdn", "budget": budget, "depth": int(tree.depths.max()),
             **bench_gdn_budget(model, cache, tree, repeats)}
        r["fork/naive"] = r["fork_verify_ms"] / r["naive_verify_ms"]
        r["wy/naive"] = r["wy_verify_ms"] / r["naive_verify_ms"]
        r["commit/verify fork"] = r["fork_commit_ms"] / r["fork_verify_ms"]
        r["commit/verify wy"] = r["wy_commit_ms"] / r["wy_verify_ms"]
        for name in [g for g, _ in GOALS]:  # the same ratios from the fastest run of each (noise check)
            num, den = {"wy/naive": ("wy_verify", "naive_verify"), "fork/naive": ("fork_verify", "naive_verify"),
                        "commit/verify fork": ("fork_commit", "fork_verify"),
                        "commit/verify wy": ("wy_commit", "wy_verify")}[name]
            r[f"{name} (min)"] = r[f"{num}_min_ms"] / r[f"{den}_min_ms"]
        mb = {k: r[k] / 2**20 for k in ("fork_states_bytes", "wy_kernel_peak_bytes", "naive_peak_extra_bytes",
                                        "fork_peak_extra_bytes", "wy_peak_extra_bytes")}
        print(f"{budget:>6} {r['depth']:>5} {r['naive_verify_ms']:>7.2f} {r['fork_verify_ms']:>7.2f} "
              f"{r['wy_verify_ms']:>7.2f} {r['fork/naive']:>7.2f} {r['wy/naive']:>6.2f} "
              f"{r['fork_commit_ms']:>7.2f} {r['wy_commit_ms']:>6.2f} {r['commit/verify fork']:>6.1%} "
              f"{r['commit/verify wy']:>6.1%} {mb['fork_states_bytes']:>9.2f}MB {mb['wy_kernel_peak_bytes']:>6.2f}MB "
              f"{mb['naive_peak_extra_bytes']:>6.2f}MB {mb['fork_peak_extra_bytes']:>7.2f}MB "
              f"{mb['wy_peak_extra_bytes']:>6.2f}MB")
        rows.append(r)
        if budget == GOAL_BUDGET:
            goal_tree = tree
    goal_row = next(r for r in rows if r["budget"] == GOAL_BUDGET)
    print(f"\ngoals at budget {GOAL_BUDGET}:")
    missed = False
    for name, limit in GOALS:
        ok = goal_row[name] <= limit if name.endswith("naive") else goal_row[name] < limit
        missed |= not ok
        print(f"  {'PASS' if ok else 'MISS'}  {name} = {goal_row[name]:.3f} (goal {'<=' if name.endswith('naive') else '<'} "
              f"{limit}; ratio of the fastest runs: {goal_row[name + ' (min)']:.3f})")
    if missed:
        print(f"\nbreakdown at budget {GOAL_BUDGET}, ms per call (all 6 GDN layers; replay_gdn includes "
              f"its gated_delta_chain and tree_conv; rest = outside the GDN kernels):")
        for (mode, part), t in breakdown(model, cache, goal_tree, repeats).items():
            inner = t["replay_gdn"] if part == "commit" else t["tree_conv"] + t["gated_delta_fork"] + t["gated_delta_wy"]
            print(f"  {mode:>5} {part:>6}: total {t['total']:6.2f}  tree_conv {t['tree_conv']:5.2f}  "
                  f"fork {t['gated_delta_fork']:5.2f}  wy {t['gated_delta_wy']:5.2f}  "
                  f"chain {t['gated_delta_chain']:5.2f}  replay_gdn {t['replay_gdn']:5.2f}  rest {t['total'] - inner:5.2f}")
    return rows


# ----------------------------------------------------------------------------- MLA target

def hf_decoder(model, prefix):
    """The stock forward of 1 token on a DynamicCache holding ``prefix`` (cropped back after)."""
    from transformers import DynamicCache
    hf_cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(prefix[None], past_key_values=hf_cache, use_cache=True)

    @torch.no_grad()
    def decode():
        ms, _ = timed(lambda: model(prefix[-1:][None], past_key_values=hf_cache, use_cache=True))
        hf_cache.crop(-1)
        return ms
    return decode


def run_mla(repeats: int, gen: torch.Generator) -> list[dict]:
    model = build_target("mla")
    V = model.config.vocab_size
    prefix = torch.randint(V, (PREFIX_LEN,), generator=gen)
    cache, _ = prefill(model, prefix)
    trees = {0: chain_tree(torch.empty(0, dtype=torch.long), int(prefix[-1]))}
    trees.update({b: make_tree(V, b, gen) for b in BUDGETS})
    hf_decode = hf_decoder(model, prefix)
    times = {b: [] for b in [*trees, "hf"]}
    for r in range(repeats + 1):  # interleaved over budgets and the stock decode; repeat 0 warms up
        for b, tree in trees.items():
            ms, _ = timed(lambda: verify(model, copy_cache(cache), tree))
            times[b].append(ms) if r else None
        ms = hf_decode()
        times["hf"].append(ms) if r else None
    root_ms, hf_ms = statistics.median(times[0]), statistics.median(times["hf"])
    print(f"\nMLA target ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params), prefix {PREFIX_LEN}, "
          f"median of {repeats}: 1-token decode = verify(root-only) {root_ms:.2f} ms "
          f"(min {min(times[0]):.2f}), stock HF {hf_ms:.2f} ms (min {min(times['hf']):.2f})")
    print(f"{'budget':>6} {'depth':>5} {'verify ms':>9} {'/root-only':>10} {'/HF decode':>10} {'min ms':>7} {'min/min HF':>10}")
    rows = []
    for b, tree in trees.items():
        med, low = statistics.median(times[b]), min(times[b])
        rows.append({"arch": "mla", "budget": b, "depth": int(tree.depths.max()), "mla_verify_ms": med,
                     "mla_verify_min_ms": low, "over_root_only_verify": med / root_ms,
                     "over_hf_decode": med / hf_ms, "hf_decode_ms": hf_ms, "hf_decode_min_ms": min(times["hf"])})
        print(f"{b:>6} {rows[-1]['depth']:>5} {med:>9.2f} {med / root_ms:>10.2f} {med / hf_ms:>10.2f} "
              f"{low:>7.2f} {low / min(times['hf']):>10.2f}")
    return rows


def save(rows: list[dict], repeats: int) -> None:
    meta = {"prefix_len": PREFIX_LEN, "repeats": repeats, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__}
    rows = [{**r, **meta} for r in rows]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nsaved {OUT}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 15")
    repeats = 3 if parser.parse_args().quick else 15
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows = run_gdn(repeats, gen) + run_mla(repeats, gen)
    save(rows, repeats)


if __name__ == "__main__":
    main()
