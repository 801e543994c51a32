"""Cost of a batched verify against a batched AR step (issue 13 items 1 and 4).

On the real-size random-init targets (``build_target("gdn" | "mla")``, float32, ONE thread),
every sequence with a committed prefix of ``--prefix`` random tokens:

- ``ar_step``: one stock decode step of batch B (``DynamicCache``, a 2-D attention mask);
- ``verify_batch``: ONE forward over B trees of ``budget`` nodes each (``verify.verify_batch``);
- ``verify_loop``: the same B trees verified one sequence at a time (batch-1 ``verify``);
- ``stock_batch``: transformers' stock forward of the same B x (budget + 1) tree tokens as
  plain causal rows (no tree): what a batch of that many tokens costs with no tree machinery, the
  floor the batched verify is read against (issue 29 item 4);
- per node: batch-1 verify at budgets 16 / 64 / 256, the marginal ms per node between them,
  and the FLOP floor per node (2 x active matmul parameters / this core's measured GFLOP/s);
- packed: B trees of different sizes (``PACKED_BUDGETS``, per-prompt budgets of a batch)
  verified packed (``verify.verify_batch``'s default: N = sum of the tree sizes tokens) and
  padded to the largest tree (``packed=False``: B x the largest), beside a batched AR step
  (issue 29 item 4);
- memory: peak live bytes of one batch-16 verify at budget 64 (fork and wy);
- breakdown of one batched verify: buffers + mask, the new K/V rows written into the batch's
  tensors (``TreeBatch._written``),
  the GDN layers (``wy.tree_layer_batch``, and its per-sequence twin for comparison), the
  rest of the forward.

Times are THIS THREAD's CPU time (``time.thread_time``), so other jobs on a shared machine
inflate them far less than wall time; medians of ``--repeats`` runs (methods interleaved, one
warm-up), min beside them as a noise check. Results -> data/results/bench_batch.csv.

    PYTHONPATH=. taskset -c 0 python scripts/bench_batch.py [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch
import transformers
from transformers.cache_utils import DynamicLayer

from ddtree_lab.common import RESULTS_DIR
from ddtree_lab.experiments.plumbing.results import write_timing_table
from ddtree_lab.core.verify import loop_ready
from ddtree_lab.core.families.gdn import naive as gdn_naive
from ddtree_lab.core.families.gdn.wy import tree_layer_batch
from ddtree_lab.core.harness import timed_calls
from ddtree_lab.core import verify as vmod
from ddtree_lab.core.models import build_target, count_parameters
from ddtree_lab.core.verify import prefill, verify
from ddtree_lab.experiments.plumbing.spread import ratio_columns
from ddtree_lab.experiments.plumbing.measure import LiveBytes, random_prefix, random_tree, timed
from ddtree_lab.experiments.plumbing.measure import interleaved as measure_interleaved

OUT = RESULTS_DIR / "bench_batch.csv"
clock = time.thread_time  # CPU seconds of this thread: robust to other jobs sharing the machine


def timed_ms(fn) -> float:
    return timed(fn, clock)[0]


def interleaved_times(fns: dict, repeats: int) -> dict:
    """``measure.interleaved`` on this thread's CPU clock."""
    return measure_interleaved(fns, repeats, clock)


def interleaved(fns: dict, repeats: int) -> dict:
    """{name: (median ms, min ms)} of every fn, run in turn ``repeats`` times after one warm-up."""
    return {name: (statistics.median(t), min(t)) for name, t in interleaved_times(fns, repeats).items()}


# ----------------------------------------------------------------------------- workloads

def caches_and_trees(model, B: int, budget, prefix: int):
    """B prefilled caches (prefixes of ``prefix`` random tokens) and B trees of ``budget`` nodes
    (an int, or one per sequence)."""
    budgets = [budget] * B if isinstance(budget, int) else list(budget)
    caches = [prefill(model, random_prefix(model, prefix, seed=b))[0] for b in range(B)]
    trees = [random_tree(model.config.vocab_size, n, seed=b) for b, n in enumerate(budgets)]
    return caches, trees


def discarded(caches, out):
    """``out`` after every cache forgot the verify that made it (``TreeCache.discard``): the
    next call verifies the same trees on the same committed rows, as a round of the loop does
    (its cache's buffers kept, no snapshot copy)."""
    for c in caches:
        c.discard()
    return out


def _prefilled(model, B: int, prefix: int):
    """A stock ``DynamicCache`` holding B random prefixes of ``prefix`` tokens -> (cache,
    2-D mask [B, prefix], next positions [B, 1])."""
    prompts = [random_prefix(model, prefix, seed=b) for b in range(B)]
    with torch.no_grad():
        _, cache, mask = vmod.padded_prefill(model, prompts)
    return cache, mask, mask.sum(-1, keepdim=True)


def ar_stepper(model, B: int, prefix: int):
    """A function running one batch-B stock decode step (the cache grows by one each call) on
    random tokens, a fresh column each call (identical tokens would route every row of a MoE
    layer to the same experts and understate a step)."""
    cache, mask, pos = _prefilled(model, B, prefix)
    state = {"mask": mask, "pos": pos, "step": 0}
    tokens = torch.randint(model.config.vocab_size, (B, 64), generator=torch.Generator().manual_seed(B))

    @torch.no_grad()
    def step():
        state["mask"] = torch.cat([state["mask"], state["mask"].new_ones(B, 1)], 1)
        column = state["step"] % tokens.shape[1]
        model(tokens[:, column:column + 1], attention_mask=state["mask"], position_ids=state["pos"],
              past_key_values=cache, use_cache=True)
        state["pos"], state["step"] = state["pos"] + 1, state["step"] + 1
    return step


def stock_forwarder(model, tokens: torch.Tensor, prefix: int):
    """A function running one stock forward of tokens [B, n] after B prefixes (causal within
    the n, a 2-D mask, ``DynamicCache``): the floor of a batched verify of the same tokens,
    with no tree in it (on the GDN target transformers' own multi-token linear-attention
    path). After each call the attention layers' K/V are cut back to the prefixes; the GDN
    layers' fixed-size states are overwritten at the same cost."""
    (B, n), (cache, mask, pos) = tokens.shape, _prefilled(model, tokens.shape[0], prefix)
    mask = torch.cat([mask, mask.new_ones(B, n)], 1)
    positions = pos + torch.arange(n)

    @torch.no_grad()
    def forward():
        model(tokens, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
        for layer in cache.layers:
            if isinstance(layer, DynamicLayer):
                layer.crop(-n)
    return forward


def batch_row(model, B: int, budget: int, prefix: int, mode: str, repeats: int) -> dict:
    caches, trees = caches_and_trees(model, B, budget, prefix)
    fns = {"ar_step": ar_stepper(model, B, prefix),
           "verify_batch": lambda: discarded(caches, vmod.verify_batch(model, caches, trees, mode)),
           "verify_loop": lambda: [discarded([c], verify(model, c, t, mode)) for c, t in zip(caches, trees)],
           "stock_batch": stock_forwarder(model, torch.stack([t.tokens for t in trees]), prefix)}
    times = interleaved_times(fns, repeats)
    row = {"B": B, "budget": budget, "mode": mode}
    for name, t in times.items():
        row[f"{name}_ms"], row[f"{name}_min_ms"] = statistics.median(t), min(t)
    # ratios: median of the paired per-repeat ratios, 95% interval, sign test
    row |= ratio_columns("verify_batch/ar_step", times["verify_batch"], times["ar_step"])
    row |= ratio_columns("verify_loop/verify_batch", times["verify_loop"], times["verify_batch"])
    row |= ratio_columns("stock_batch/ar_step", times["stock_batch"], times["ar_step"])
    row |= ratio_columns("verify_batch/stock_batch", times["verify_batch"], times["stock_batch"])
    return row


PACKED_BUDGETS = (64, 4, 16, 1, 32, 2, 8, 16)  # per sequence, cycled: trees of different sizes


def packed_row(model, B: int, prefix: int, mode: str, repeats: int) -> dict:
    """B trees of ``PACKED_BUDGETS`` (cycled) nodes: the packed verify, the same trees padded
    to the largest, and a batched AR step; paired ratios."""
    caches, trees = caches_and_trees(model, B, [PACKED_BUDGETS[b % len(PACKED_BUDGETS)] for b in range(B)], prefix)
    fns = {"ar_step": ar_stepper(model, B, prefix),
           "packed": lambda: discarded(caches, vmod.verify_batch(model, caches, trees, mode)),
           "padded": lambda: discarded(caches, vmod.verify_batch(model, caches, trees, mode, packed=False))}
    times = interleaved_times(fns, repeats)
    row = {"B": B, "mode": mode, "tokens_packed": sum(len(t) for t in trees),
           "tokens_padded": B * max(len(t) for t in trees)}
    for name, t in times.items():
        row[f"{name}_ms"], row[f"{name}_min_ms"] = statistics.median(t), min(t)
    row |= ratio_columns("padded/packed", times["padded"], times["packed"])
    row |= ratio_columns("packed/ar_step", times["packed"], times["ar_step"])
    return row


# ----------------------------------------------------------------------------- per node

def matmul_gflops(model, repeats: int) -> float:
    """This core's float32 GFLOP/s on the target's own MLP shape, 256 rows."""
    h, inter = model.config.hidden_size, model.config.intermediate_size
    x, w = torch.randn(256, h), torch.randn(h, inter)
    ms = statistics.median(timed_ms(lambda: x @ w) for _ in range(repeats * 10))
    return 2 * 256 * h * inter / (ms * 1e-3) / 1e9


def flops_per_token(model) -> float:
    """2 x the active matmul parameters a token meets (input embedding excluded: a lookup;
    the tied LM head counted once as a matmul)."""
    return 2.0 * count_parameters(model)["active"]


def node_rows(model, mode: str, prefix: int, repeats: int, budgets=(16, 64, 256)) -> list[dict]:
    """One row per budget (0: the stock decode step): batch-1 verify ms and the marginal ms per
    node since the previous budget, against the FLOP floor per node."""
    caches, _ = caches_and_trees(model, 1, 1, prefix)
    fns = {0: ar_stepper(model, 1, prefix)}
    for n in budgets:
        tree = random_tree(model.config.vocab_size, n)
        fns[n] = lambda t=tree: verify(model, caches[0].snapshot(), t, mode)
    res = interleaved(fns, repeats)
    floor_ms = flops_per_token(model) / (matmul_gflops(model, repeats) * 1e9) * 1e3
    rows, last = [], None
    for n, (med, low) in res.items():
        per_node = (med - res[last][0]) / (n - last) if last else float("nan")
        rows.append({"mode": mode, "budget": n, "verify_ms": med, "verify_min_ms": low, "per_node_ms": per_node,
                     "floor_per_node_ms": floor_ms, "per_node/floor": per_node / floor_ms})
        last = n
    return rows


# ----------------------------------------------------------------------------- breakdown

def breakdown(model, B: int, budget: int, prefix: int, mode: str, repeats: int, gdn_layer=None) -> dict:
    """Median ms per batched verify spent in each piece, and the rest of the forward
    (gdn_layer: ``wy.tree_layer_batch`` (default) or its per-sequence twin
    ``gdn_naive.tree_layer_batch``, recorded as "gdn_naive.tree_layer_batch")."""
    layer = gdn_layer or tree_layer_batch
    caches, trees = caches_and_trees(model, B, budget, prefix)
    rows = []
    for _ in range(repeats + 1):
        totals: dict = {}
        with timed_calls([(vmod, "batch_buffers", "batch_buffers"), (vmod, "additive_mask", "additive_mask"),
                          (vmod.TreeBatch, "_written", "_written")], totals, clock):
            totals["total"] = timed_ms(lambda: discarded(caches, vmod.verify_batch(
                model, caches, trees, mode, gdn_layer=timed_layer(layer, totals))))
        rows.append(totals)
    frame = pd.DataFrame(rows[1:]).fillna(0.0).median()
    frame["rest_of_forward"] = frame["total"] - frame.drop("total").sum()
    name = layer.__name__ if layer is tree_layer_batch else f"{layer.__module__.rsplit('.', 1)[-1]}.{layer.__name__}"
    return {"B": B, "budget": budget, "mode": mode, "gdn_layer": name,
            **{f"{k}_ms": v for k, v in frame.items()}}


def timed_layer(layer, totals: dict):
    """``layer`` timing itself into totals["gdn_layers"] (ms)."""
    def wrapped(*args):
        start = clock()
        out = layer(*args)
        totals["gdn_layers"] = totals.get("gdn_layers", 0.0) + 1e3 * (clock() - start)
        return out
    return wrapped


# ----------------------------------------------------------------------------- memory

def memory_rows(model, B: int, budget: int, prefix: int, modes) -> list[dict]:
    """Peak live bytes allocated during one batched verify of B trees of ``budget`` nodes
    (``measure.LiveBytes``: fork's per-node states, wy's N x N matrices, activations)."""
    caches, trees = caches_and_trees(model, B, budget, prefix)
    rows = []
    for mode in modes:
        snaps = [c.snapshot() for c in caches]
        with LiveBytes() as counter:
            vmod.verify_batch(model, snaps, trees, mode)
        rows.append({"B": B, "budget": budget, "mode": mode, "peak_bytes": counter.peak})
    return rows


# ----------------------------------------------------------------------------- main

def run_arch(arch: str, args) -> dict[str, pd.DataFrame]:
    """Every table of one target, on the kernels the loops run (``verify.loop_ready``: MoE
    experts as grouped matmuls, the AR step's and the verify's alike)."""
    model = build_target(arch)
    with loop_ready(model):
        return _tables(model, arch, args)


def _tables(model, arch: str, args) -> dict[str, pd.DataFrame]:
    modes = ("wy", "fork") if arch == "gdn" else ("wy",)
    batches = [batch_row(model, B, args.budget, args.prefix, m, args.repeats) for m in modes for B in args.batches]
    nodes = [r for m in modes for r in node_rows(model, m, args.prefix, args.repeats)]
    parts = [breakdown(model, max(args.batches), args.budget, args.prefix, m, args.repeats) for m in modes]
    parts += [breakdown(model, max(args.batches), args.budget, args.prefix, "wy", args.repeats,
                        gdn_naive.tree_layer_batch)] if arch == "gdn" else []
    memory = memory_rows(model, max(args.batches), 64, args.prefix, modes)
    packed = [packed_row(model, B, args.prefix, m, args.repeats) for m in modes for B in args.batches if B > 1]
    return {"batch": pd.DataFrame(batches), "per_node": pd.DataFrame(nodes), "breakdown": pd.DataFrame(parts),
            "memory": pd.DataFrame(memory), "packed": pd.DataFrame(packed)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 repeats, batches 1 and 16")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--prefix", type=int, default=128)
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--archs", default="gdn,mla", help="comma-separated: gdn, mla")
    return p


def run(**options) -> None:
    """The bench with ``parser()``'s defaults, changed by ``options`` (its options' names)."""
    args = parser().parse_args([])
    vars(args).update(options)
    args.repeats = 3 if args.quick else args.repeats
    args.batches = (1, 16) if args.quick else (1, 4, 16)
    torch.set_num_threads(1)
    tables = []
    for arch in args.archs.split(","):
        for kind, table in run_arch(arch, args).items():
            print(f"\n{arch} {kind} (median of {args.repeats}, thread CPU ms, one thread, prefix {args.prefix})")
            print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
            tables.append(table.assign(arch=arch, table=kind))
    meta = {"prefix": args.prefix, "repeats": args.repeats,  # threads, load, machine: the stamp
            "torch": torch.__version__, "transformers": transformers.__version__}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_timing_table(pd.concat(tables, ignore_index=True).assign(**meta), OUT)
    print(f"\nsaved {OUT}")


def main() -> None:
    run(**vars(parser().parse_args()))


if __name__ == "__main__":
    main()
