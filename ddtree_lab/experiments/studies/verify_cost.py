"""Cost of exact tree verification: GDN naive / fork / wy and MLA (TreeWY, arXiv 2608.20961;
docs/background.md section 4).

Everything is timed on one prefilled cache (``prefix_len`` random tokens) with trees from
``build_tree`` over randn(16, V) * 3 draft logits; the tree of a budget depends on
(seed, budget) only, so tables with different budget lists share their trees. Modes (and, for
MLA, budgets and the stock decode) are interleaved per repeat with one warm-up repeat, and
medians are reported, with the minimum beside them as a noise check. Every ratio is the
median of the per-repeat paired ratio with its 95% interval and sign test (``spread``:
columns ``<ratio>_lo``, ``<ratio>_hi``, ``<ratio>_p``).

The honest GDN baseline is ``stock``: transformers' own forward of the same flattened N+1
tokens on a copy of its own cache (the model's GDN path, as a user's chain verification runs
it, no tree mask); naive, fork and wy are reported over it as well as over naive (which is
the lab's own WY kernel on chain parents, so "wy / naive" compares the kernel with itself).

Memory is MEASURED with ``LiveBytes``, a dispatch-mode counter of live tensor storage over
every aten output (views counted once per storage, freed when the last tensor dies), except
the fork state, which is counted directly: sum over GDN layers of the per-node states that
fork keeps from verify until commit, (N+1) x H x dk x dv x itemsize each. naive runs the same
WY kernel on chain parents, so wy's N x N matrices cost naive as much (peak wy == peak nv).

    table = gdn_cost_table(build_target("gdn"))      # one row per budget
    print("\\n".join(goal_lines(table, budget=64)))   # PASS / MISS per goal
"""
from __future__ import annotations

import copy
import statistics
import time

import pandas as pd
import torch
from transformers import DynamicCache

from ...core import spec
from ...core.families.gdn import naive as gdn_naive, wy
from ...core.tree import ancestor_mask
from ...core.verify import GDN_MODES, TreeCache, commit, prefill, verify
from ...core.decode import device_sync
from ...core.harness import timed_calls
from ..plumbing.measure import LiveBytes, random_prefix, random_tree, synced_clock, timed
from ..plumbing.spread import format_ratio_columns, ratio_columns

GDN_BUDGETS = (1, 8, 16, 32, 64, 128, 256)
MLA_BUDGETS = (0, 1, 8, 16, 32, 64, 128, 256)
GDN_RATIOS = {"fork/naive": ("fork", "naive"), "wy/naive": ("wy", "naive"), "naive/stock": ("naive", "stock"),
              "fork/stock": ("fork", "stock"), "wy/stock": ("wy", "stock")}
GDN_COLUMNS = ("budget", "depth", "naive_ms", "fork_ms", "wy_ms", "stock_ms", *GDN_RATIOS,
               "commit_fork_ms", "commit_wy_ms", "commit/fork", "commit/wy",
               "naive_min_ms", "fork_min_ms", "wy_min_ms", "stock_min_ms", "commit_fork_min_ms", "commit_wy_min_ms",
               "fork_state_bytes", "wy_nxn_bytes", "peak_naive_bytes", "peak_fork_bytes", "peak_wy_bytes",
               *(f"{r}_{s}" for r in (*GDN_RATIOS, "commit/fork", "commit/wy") for s in ("lo", "hi", "p")))
MLA_COLUMNS = ("budget", "depth", "verify_ms", "verify_min_ms", "verify/root", "verify/hf",
               "hf_ms", "hf_min_ms", *(f"{r}_{s}" for r in ("verify/root", "verify/hf") for s in ("lo", "hi", "p")))
# goal: (ratio column, comparison, limit, numerator and denominator of its fastest-run twin)
GOALS = (("wy/naive", "<=", 1.1, "wy_min_ms", "naive_min_ms"),
         ("fork/naive", "<=", 2.0, "fork_min_ms", "naive_min_ms"),
         ("commit/fork", "<", 0.1, "commit_fork_min_ms", "fork_min_ms"),
         ("commit/wy", "<", 0.1, "commit_wy_min_ms", "wy_min_ms"))


# ----------------------------------------------------------------------------- measuring

def stock_flat_timer(model, prefix: list[int]):
    """tree -> ms of the stock forward of the flattened tree (its N+1 tokens read as a sequence,
    no tree mask) on a copy of a stock ``DynamicCache`` holding ``prefix``: what a tree-unaware
    engine runs, with the stock kernels (torch chunk / fla, causal-conv1d when installed)."""
    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([prefix], device=device), past_key_values=cache, use_cache=True)

    @torch.no_grad()
    def run(tree) -> float:
        work = copy.deepcopy(cache)
        device_sync()
        start = time.perf_counter()
        model(tree.tokens[None].to(device), past_key_values=work, use_cache=True)
        device_sync()
        return 1e3 * (time.perf_counter() - start)
    return run


def peak_extra_bytes(model, cache: TreeCache, tree, mode: str) -> int:
    """Peak live bytes allocated during one whole ``verify`` in ``mode``."""
    with LiveBytes() as counter:
        verify(model, cache.snapshot(), tree, mode)
    return counter.peak


def wy_kernel_peak_bytes(model, tree) -> int:
    """Peak live bytes inside one gated_delta_wy call with this target's GDN shapes on ``tree``
    (its (N+1)^2 x H decay / A / attention matrices, ~32 B * H * (N+1)^2; one layer at a time)."""
    m = next(iter(wy.gdn_modules(model).values()))
    n, H, dk, dv = len(tree), m.num_v_heads, m.head_k_dim, m.head_v_dim
    q, k = (torch.nn.functional.normalize(torch.randn(n, H, dk), dim=-1) for _ in range(2))
    v, g, beta, S0 = torch.randn(n, H, dv), -torch.rand(n, H), torch.rand(n, H), torch.randn(H, dk, dv)
    anc = ancestor_mask(tree)  # a tree buffer, made before verify
    with LiveBytes() as counter:
        wy.gated_delta_wy(q, k, v, g, beta, tree.parents, S0=S0, anc=anc)
    return counter.peak


def fork_state_bytes(pending) -> int:
    """Bytes of the per-node states [N+1, H, dk, dv] a fork verify's ``Pending`` holds, all layers."""
    return sum(r.states.numel() * r.states.element_size() for r in pending.gdn.values())


# ----------------------------------------------------------------------------- setup

# ----------------------------------------------------------------------------- GDN target

def _time_gdn_modes(model, cache, tree, repeats: int, stock) -> dict:
    """{(mode, "verify" | "commit"): [ms] * repeats} for the GDN modes and "stock" (``stock``:
    ``stock_flat_timer``), interleaved in a rotating order; commit keeps the deepest root path
    (worst case for replay); naive and stock have no commit time."""
    path = tree.path_to(int(tree.depths.argmax()))
    modes = GDN_MODES + ("stock",)
    times = {(m, part): [] for m in modes for part in ("verify", "commit")}
    for r in range(repeats + 1):  # repeat 0 warms up
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            if mode == "stock":
                t_verify, t_commit = stock(tree), None
            else:
                work = cache.snapshot()
                t_verify, out = timed(lambda: verify(model, work, tree, mode))
                t_commit, _ = timed(lambda: commit(model, work, out.pending, path)) if spec.gdn_mode(mode).exact \
                    else (None, None)
            if r:
                times[(mode, "verify")].append(t_verify)
                times[(mode, "commit")].append(t_commit)
    return times


def _gdn_row(model, cache, tree, repeats: int, stock) -> dict:
    times = _time_gdn_modes(model, cache, tree, repeats, stock)
    med = {k: statistics.median(v) for k, v in times.items() if v[0] is not None}
    low = {k: min(v) for k, v in times.items() if v[0] is not None}
    ratios = {}
    for name, (num, den) in GDN_RATIOS.items():
        ratios.update(ratio_columns(name, times[(num, "verify")], times[(den, "verify")]))
    for m in ("fork", "wy"):
        ratios.update(ratio_columns(f"commit/{m}", times[(m, "commit")], times[(m, "verify")]))
    forked = verify(model, cache.snapshot(), tree, "fork").pending
    row = {"depth": int(tree.depths.max()),
           **{f"{m}_ms": med[(m, "verify")] for m in GDN_MODES + ("stock",)},
           **{f"commit_{m}_ms": med[(m, "commit")] for m in ("fork", "wy")},
           **{f"{m}_min_ms": low[(m, "verify")] for m in GDN_MODES + ("stock",)},
           **{f"commit_{m}_min_ms": low[(m, "commit")] for m in ("fork", "wy")},
           **ratios, "fork_state_bytes": fork_state_bytes(forked), "wy_nxn_bytes": wy_kernel_peak_bytes(model, tree)}
    row.update({f"peak_{m}_bytes": peak_extra_bytes(model, cache, tree, m) for m in GDN_MODES})
    return row


def _check_gdn(model) -> None:
    if not wy.gdn_modules(model):
        raise ValueError("gdn_cost_table needs a GDN target, e.g. build_target('gdn')")


def gdn_cost_table(model, budgets=GDN_BUDGETS, prefix_len: int = 128, repeats: int = 5,
                   seed: int = 0) -> pd.DataFrame:
    """One row per budget (median over ``repeats`` of all three GDN modes and the stock
    forward, interleaved):

    budget, depth             draft nodes N and the tree's depth
    naive_ms fork_ms wy_ms    ``verify`` ms per mode
    stock_ms                  transformers' own forward of the same N+1 flattened tokens on
                              a copy of its DynamicCache (``stock_flat_timer``)
    fork/naive wy/naive naive/stock fork/stock wy/stock
                              median of the per-repeat paired ratio, with _lo, _hi (95%
                              interval) and _p (sign test) beside each (``spread``)
    commit_fork_ms commit_wy_ms  ``commit`` ms of the deepest root path after that verify
                              (fork: pick the stored state; wy: the closed form from U, G, k);
                              commit/fork, commit/wy: over the same repeat's verify (paired, as above)
    *_min_ms                  the fastest run of each of the six timings above
    fork_state_bytes          per-node states fork holds until commit, = (N+1) x GDN layers x
                              H x dk x dv x itemsize
    wy_nxn_bytes              measured peak inside one ``gated_delta_wy`` call (N x N matrices)
    peak_{naive,fork,wy}_bytes  measured peak live bytes allocated during a whole verify
    """
    _check_gdn(model)
    prefix = random_prefix(model, prefix_len, seed)
    cache, _ = prefill(model, prefix)
    stock, V = stock_flat_timer(model, prefix.tolist()), model.config.vocab_size
    rows = [{"budget": b, **_gdn_row(model, cache, random_tree(V, b, seed), repeats, stock)} for b in budgets]
    return pd.DataFrame(rows, columns=list(GDN_COLUMNS))


def goal_lines(gdn_table: pd.DataFrame, budget: int = 64) -> list[str]:
    """'PASS  ...' or 'MISS  ...' per goal at ``budget``: wy <= 1.1x naive, fork <= 2x naive,
    commit < 10% of a verify (fork and wy), with the same ratio of the fastest runs beside."""
    match = gdn_table[gdn_table["budget"] == budget]
    if match.empty:
        raise ValueError(f"budget {budget} is not in the table (budgets {gdn_table['budget'].tolist()})")
    row, lines = match.iloc[0], []
    for name, op, limit, num, den in GOALS:
        ok = row[name] <= limit if op == "<=" else row[name] < limit
        lines.append(f"{'PASS' if ok else 'MISS'}  {name} = {format_ratio_columns(row, name)} (goal {op} {limit}; "
                     f"ratio of the fastest runs: {row[num] / row[den]:.3f})")
    return lines


# (module, function, the column it adds to): the batched tree conv counts as the tree conv
KERNELS = ((wy, "tree_conv", "tree_conv"), (wy, "tree_conv_batch", "tree_conv"),
           (wy, "gated_delta_fork", "gated_delta_fork"), (wy, "gated_delta_wy", "gated_delta_wy"),
           (gdn_naive, "gated_delta_chain", "gated_delta_chain"), (gdn_naive, "replay_gdn", "replay_gdn"))


def gdn_breakdown(model, budget: int = 64, prefix_len: int = 128, repeats: int = 5,
                  seed: int = 0) -> pd.DataFrame:
    """Where a verify (and a commit of the deepest path) spends its time, per mode: one row per
    (mode, part) with median ms total, inside each GDN kernel of ``KERNELS`` (``harness.timed_calls``) (all GDN layers;
    replay includes its chain and tree_conv) and rest = outside the GDN kernels. Same tree
    and prefix as ``gdn_cost_table`` at this budget and seed."""
    _check_gdn(model)
    cache, _ = prefill(model, random_prefix(model, prefix_len, seed))
    tree = random_tree(model.config.vocab_size, budget, seed)
    path, spent = tree.path_to(int(tree.depths.argmax())), {column: 0.0 for _, _, column in KERNELS}

    def measure(fn, into: list):  # {"total": ms, kernel: ms inside fn} into ``into``; -> fn's result
        before = dict(spent)
        ms, out = timed(fn)
        into.append({"total": ms, **{k: spent[k] - before[k] for k in spent}})
        return out
    runs = {(m, part): [] for m in GDN_MODES for part in ("verify", "commit") if (m, part) != ("naive", "commit")}
    with timed_calls(KERNELS, spent, synced_clock):
        for _ in range(repeats):
            for mode in GDN_MODES:
                work = cache.snapshot()
                out = measure(lambda: verify(model, work, tree, mode), runs[(mode, "verify")])
                if spec.gdn_mode(mode).exact:
                    measure(lambda: commit(model, work, out.pending, path), runs[(mode, "commit")])
    return pd.DataFrame([_breakdown_row(mode, part, parts) for (mode, part), parts in runs.items()])


def _breakdown_row(mode: str, part: str, parts: list[dict]) -> dict:
    t = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    inner = t["replay_gdn"] if part == "commit" else t["tree_conv"] + t["gated_delta_fork"] + t["gated_delta_wy"]
    return {"mode": mode, "part": part, "total_ms": t["total"], "tree_conv_ms": t["tree_conv"],
            "fork_ms": t["gated_delta_fork"], "wy_ms": t["gated_delta_wy"], "chain_ms": t["gated_delta_chain"],
            "replay_ms": t["replay_gdn"], "rest_ms": t["total"] - inner}


# ----------------------------------------------------------------------------- MLA target

def hf_decoder(model, prefix: torch.Tensor):
    """() -> ms of the stock forward of 1 token on a DynamicCache holding ``prefix`` (cropped
    back after each call)."""
    hf_cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(prefix[None], past_key_values=hf_cache, use_cache=True)

    @torch.no_grad()
    def decode():
        ms, _ = timed(lambda: model(prefix[-1:][None], past_key_values=hf_cache, use_cache=True))
        hf_cache.crop(-1)
        return ms
    return decode


def mla_cost_table(model, budgets=MLA_BUDGETS, prefix_len: int = 128, repeats: int = 5,
                   seed: int = 0) -> pd.DataFrame:
    """One row per budget (0 = root only), medians over ``repeats`` interleaved with the decode:

    budget, depth           draft nodes N and the tree's depth
    verify_ms, verify_min_ms  ``verify`` ms (median, fastest run)
    verify/root             over a root-only ``verify`` (a 1-token decode on the tree path)
    verify/hf               over the stock HF forward of 1 token with a DynamicCache
                            (both: median of the per-repeat paired ratio, with _lo, _hi and
                            _p beside, ``spread``)
    hf_ms, hf_min_ms        that stock decode (median, fastest run)
    """
    prefix = random_prefix(model, prefix_len, seed)
    cache, _ = prefill(model, prefix)
    trees = {b: random_tree(model.config.vocab_size, b, seed) for b in dict.fromkeys((0, *budgets))}
    hf_decode = hf_decoder(model, prefix)
    times = {b: [] for b in [*trees, "hf"]}
    for r in range(repeats + 1):  # repeat 0 warms up
        for b, tree in trees.items():
            ms, _ = timed(lambda: verify(model, cache.snapshot(), tree))
            times[b] += [ms] if r else []
        ms = hf_decode()
        times["hf"] += [ms] if r else []
    hf_ms = statistics.median(times["hf"])
    rows = [{"budget": b, "depth": int(trees[b].depths.max()), "verify_ms": statistics.median(times[b]),
             "verify_min_ms": min(times[b]), "hf_ms": hf_ms, "hf_min_ms": min(times["hf"]),
             **ratio_columns("verify/root", times[b], times[0]), **ratio_columns("verify/hf", times[b], times["hf"])}
            for b in budgets]
    return pd.DataFrame(rows, columns=list(MLA_COLUMNS))
