"""What one decoding round costs: the lab's phases beside the field's reference loop, and the
lab's verify against its floor.

- ``run_round_cost(pairs, prompts)``: one interleaved run (``ROUND_RUN``, store ``round_cost``),
  T = 0, AR, the reference loop, the lab's DFlash and DDTree at ``ROUND_BUDGETS``, meant for a
  quiet machine, one lane (every row records the load average); ``round_table`` gives each
  method's tokens/s over the reference loop's and over AR as paired per-prompt ratios.
- ``phase_table(frame)``: from such a run (or the bench store), per (target, method,
  budget) at T = 0, the median over prompts of milliseconds per round in each phase
  (``decode.PHASES``, the lab's own device-synced timers) and in all; the reference loop
  (``dflash_generate``) exposes no phases, so its row has the total per round only. Beside
  them, for every loop alike, the round-cost run times the two models' forward calls from
  outside (``run_with_forwards``: ``measure.model_clock``): per round the target's forwards
  (the prefill left out), the drafter's (its forwards and its logits on the target's head) and
  the rest of the loop (everything else: logits of
  the draft, trees, masks, acceptance, cache work, Python). From the same timers, each loop's
  tokens per second of its models' work (``forwards_rate``: the loop's own work left out) over
  the reference loop's tokens/s as it runs: the most that loop could reach against the
  reference chain at no cost of its own, on this machine's models (``ceiling_note``).
- ``verify_floor(pair, ...)``: at real decoding states (the committed sequence before a round
  of a lab run, and that round's own tree), the lab's verify as the loop calls it
  (``verify.verify_batch_unchecked``, features included) against the floor of what any verify
  can cost: transformers' stock forward of the same flattened tree tokens, with the same
  additive tree mask and positions, on a stock ``DynamicCache`` holding the same committed rows
  (hidden states returned, as ``dflash_generate`` asks for them). The two are timed in turn,
  in alternating order, paired per repeat (``plumbing.measure.timed``; ``spread.paired_ratio``):
  the lab's verify on its cache as the loop holds it (its buffers with room, each verify
  forgotten by ``TreeCache.discard`` outside the timers; a fresh ``snapshot`` per repeat would
  grow every buffer at every verify, which the loop does once per doubling), the floor on a
  fresh copy of its ``DynamicCache`` made outside the timers (its ``cat`` allocates at every
  call, in a loop too).

On the GDN hybrid the floor's GDN layers read the flattened tree as a chain (naive): it is the
stock cost of the same tokens, not an exact tree verify.
"""
from __future__ import annotations

import copy
import statistics

import pandas as pd
import torch
from transformers import DynamicCache

from ddtree_lab.core.verify import loop_ready
from ...core.decode import PHASES, generate
from ddtree_lab.core.spec import gdn_mode
from ...core.models import arch_of
from ...core.verify import attention_bias, batch_buffers, prefill, verify_batch_unchecked
from ..plumbing.measure import model_clock, model_seconds, timed
from ..plumbing.results import ResultsStore
from ..plumbing.spread import format_ratio_columns, paired_ratio
from ..plumbing.sweep import AXES, EXACT_MODE, expand_grid, run_sweep, with_axes
from .bench import paired_speedups, wall_rate
from .official import run_with_official

FLOOR_BUDGETS = (16, 64)
ROUND_BUDGETS = (4, 16, 64)
ROUND_RUN = "round-cost"


def round_grid(archs=("mla", "gdn"), budgets=ROUND_BUDGETS, block_size: int = 8,
               max_new_tokens: int = 128) -> list[dict]:
    """T = 0: AR, the reference loop, the lab's DFlash, and DDTree (exact mode) at ``budgets``."""
    common = dict(block_size=[block_size], max_new_tokens=[max_new_tokens], temperature=[0.0], gdn_mode=["wy"])
    grid = []
    for arch in archs:
        grid += expand_grid(arch=[arch], method=["ar", "official", "dflash"], budget=[0], **common)
        grid += expand_grid(arch=[arch], method=["ddtree"], budget=list(budgets), **common)
    return grid


def run_round_cost(pairs: dict, prompts: list[int], store: ResultsStore | None = None, **grid) -> pd.DataFrame:
    """The interleaved round-cost run over ``prompts`` (resumable) -> its rows."""
    store = store or ResultsStore("round_cost")
    return run_sweep(round_grid(tuple(pairs), **grid), prompts, store, pairs, runner=run_with_forwards,
                     run=ROUND_RUN)


def run_with_forwards(cfg: dict, prompt_id: int, pair) -> dict:
    """``official.run_with_official`` with the models' work timed from outside
    (``measure.model_clock``), the lab's loops and the reference loop alike: metrics["forwards"]
    = seconds in {"prefill": the first target call, "target": the other target calls,
    "drafter": the drafter's forward calls, "drafter_head": its logits on the target's head}."""
    with model_clock(pair.target, pair.drafter.model) as clock:
        metrics = run_with_official(cfg, prompt_id, pair)
    target = clock.calls["target"]
    return metrics | {"forwards": {"prefill": target[0] if target else 0.0, "target": sum(target[1:]),
                                   "drafter": sum(clock.calls["drafter"]),
                                   "drafter_head": sum(clock.calls["drafter_head"])}}


def stored_round_run(store: ResultsStore | None = None, archs=None) -> pd.DataFrame | None:
    """The stored round-cost run (``ROUND_RUN``) of these models and code, of the targets
    ``archs`` (None: all), or None when there is none (``python scripts/bench_round.py`` makes
    it for the shipped pairs)."""
    frame = (store or ResultsStore("round_cost")).frame()
    if frame.empty or "run" not in frame:
        return None
    keep = frame.run == ROUND_RUN
    if archs is not None:
        keep &= frame.arch.isin(archs)
    return frame[keep] if keep.any() else None


def forwards_rate(metrics: dict) -> float:
    """A row's new tokens over the seconds of its models' work (``run_with_forwards``: both
    models' forwards, prefill included, and the drafter's head): its tokens/s with the loop's
    own work left out, the most the loop could reach on this model work; NaN for a row stored
    without those timings."""
    return len(metrics["tokens"]) / model_seconds(metrics)


def round_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per config: tau, ms per round (``phase_table``'s total) and tokens/s over the reference
    loop's and over AR's on the same prompts (paired medians with 95% intervals); vs_official_fwd:
    the config's ``forwards_rate`` (its own work left out) over the reference loop's tokens/s as
    it runs: the ceiling of vs_official on these models."""
    keys = ["arch", "method", "budget"]
    over_ref = paired_speedups(frame, "official", "vs_official").merge(
        paired_speedups(frame, "official", "vs_official_fwd", rate=forwards_rate, over_rate=wall_rate), on=list(AXES))
    over_ar = paired_speedups(frame, "ar", "vs_ar")
    taus = with_axes(frame).groupby(keys, sort=False).apply(
        lambda g: sum(sum(m["acceptance_lengths"]) for m in g["_metrics"])
        / max(1, sum(len(m["acceptance_lengths"]) for m in g["_metrics"])), include_groups=False).rename("tau")
    out = over_ref.merge(over_ar, on=list(AXES))
    out = out.join(taus, on=keys).merge(phase_table(frame)[keys + ["total_ms", "verify_ms", "draft_ms"] + FORWARD_MS],
                                        on=keys, how="left")
    return out[out.method != "ar"].reset_index(drop=True)


LOOP_NAMES = {"official": "reference loop (`dflash_generate`)", "dflash": "lab DFlash", "ddtree": "lab DDTree"}
ROUND_COLUMNS = ["target", "loop", "tau", "ms / round", "target forwards", "drafter", "rest of the loop",
                 "vs reference loop", "ceiling vs reference loop", "vs AR"]
FORWARD_MS = ["target_fwd_ms", "drafter_fwd_ms", "rest_ms"]  # per round, every loop alike (``run_with_forwards``)


def round_display(table: pd.DataFrame, archs=("mla", "gdn")) -> pd.DataFrame:
    """``round_table`` for reading (the README block and notebook 05): one row per loop, ms
    per round in all and in the models' forwards (timed from outside, every loop alike; '-'
    in a run stored before they were), ratios as '0.85x [0.74, 1.01] noise' (over the reference
    loop: wall-clock, and the ceiling: the loop's models' work only), '-' where a cell does not
    apply (the reference loop's wall-clock is not compared with itself)."""
    rows = []
    for arch in archs:
        for r in table[table.arch == arch].itertuples():
            ref = r.method == "official"
            rows.append([arch, LOOP_NAMES[r.method] + (f" {r.budget}" if r.method == "ddtree" else ""), f"{r.tau:.2f}",
                         f"{r.total_ms:.1f}", *("-" if pd.isna(v) else f"{v:.1f}" for v in
                                                (getattr(r, c) for c in FORWARD_MS)),
                         "-" if ref else format_ratio_columns(r._asdict(), "vs_official"),
                         "-" if pd.isna(r.vs_official_fwd) else format_ratio_columns(r._asdict(), "vs_official_fwd"),
                         format_ratio_columns(r._asdict(), "vs_ar")])
    return pd.DataFrame(rows, columns=ROUND_COLUMNS)


def ceiling_note(table: pd.DataFrame) -> str:
    """One sentence from ``round_table``: per target, the lab DDTree budget with the highest
    ceiling over the reference loop (``forwards_rate`` over its tokens/s), that ceiling and the
    budget's wall-clock ratio; '' when the run has no forward timings."""
    parts = []
    for arch, t in table[(table.method == "ddtree") & table.vs_official_fwd.notna()].groupby("arch", sort=False):
        best = t.loc[t.vs_official_fwd.idxmax()]
        parts.append(f"{arch} {format_ratio_columns(best, 'vs_official_fwd')} at budget {best.budget} "
                     f"(wall-clock {format_ratio_columns(best, 'vs_official')})")
    if not parts:
        return ""
    return ("Ceiling: a lab DDTree that cost nothing beyond its models' work would reach, over the "
            "reference chain loop as it runs, at its best budget: " + "; ".join(parts) + ".")


def phase_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, method, budget) at T = 0 (exact modes): rounds, ms per round in every phase
    and in all (median over prompts); the reference loop: all only."""
    t = with_axes(frame)
    t = t[(t.temperature == 0) & (t.method != "ar") & ((t.gdn_mode == EXACT_MODE) | (t.method == "official"))]
    rows = []
    for (arch, method, budget), g in t.groupby(["arch", "method", "budget"], sort=False):
        per = [{p: 1e3 * m["timings"][p] / max(1, len(m["acceptance_lengths"])) for p in PHASES + ("total",)}
               for m in g["_metrics"]]
        row = {"arch": arch, "method": method, "budget": budget, "prompts": len(per),
               "rounds": int(sum(len(m["acceptance_lengths"]) for m in g["_metrics"]))}
        for p in PHASES + ("total",):
            row[f"{p}_ms"] = statistics.median(x[p] for x in per) if method != "official" or p == "total" \
                else float("nan")
        rows.append(row | forward_ms(list(g["_metrics"])))
    return pd.DataFrame(rows)


def forward_ms(metrics: list[dict]) -> dict:
    """Medians over prompts of ms per round in the target's forwards (the prefill left out), the
    drafter's (forwards and head) and the rest of the loop (total minus all of them), from ``run_with_forwards``'
    metrics; NaN when a row has none (a run stored before they were timed)."""
    if not metrics or any("forwards" not in m for m in metrics):
        return dict.fromkeys(FORWARD_MS, float("nan"))
    per = []
    for m in metrics:
        f, rounds = m["forwards"], max(1, len(m["acceptance_lengths"]))
        drafter = f["drafter"] + f.get("drafter_head", 0.0)  # its forwards and its logits
        rest = m["timings"]["total"] - f["prefill"] - f["target"] - drafter
        per.append([1e3 * x / rounds for x in (f["target"], drafter, rest)])
    return {name: statistics.median(x[i] for x in per) for i, name in enumerate(FORWARD_MS)}


def round_states(pair, prompt_ids: list[int], budget: int, block_size: int = 8, max_new_tokens: int = 128,
                 every: int = 4) -> list[tuple[list[int], object]]:
    """(committed sequence before the round, the round's tree) of every ``every``-th round of a
    greedy DDTree run of ``budget`` (DFlash's chain at budget 0)."""
    seen, rounds = [], []
    method = "dflash" if budget == 0 else "ddtree"
    out = generate(pair.target, pair.drafter, prompt_ids, method=method, budget=max(budget, 1),
                   block_size=block_size, max_new_tokens=max_new_tokens, on_round=rounds.append)
    done = 0
    for r, rnd in enumerate(rounds):
        if r % every == 0:
            seen.append((list(prompt_ids) + out.tokens[:done], rnd.tree))
        done += len(rnd.path)
    return seen


def _floor_forward(model, cache: DynamicCache, tree, start: int):
    """The stock forward of the flattened tree on ``cache`` (``start`` committed rows), with the
    tokens, positions and additive mask verify builds (``verify.batch_buffers``)."""
    p = next(model.parameters())
    bufs = batch_buffers([tree], [start])
    bias = attention_bias(bufs, p.dtype, p.device)
    mask = {"full_attention": bias, "linear_attention": None} if arch_of(model) == "gdn" else bias
    return model(bufs.tokens.to(p.device), attention_mask=mask, position_ids=bufs.positions.to(p.device),
                 past_key_values=cache, use_cache=True, output_hidden_states=True)


@torch.no_grad()
def verify_floor(pair, prompts: list[int], budgets=FLOOR_BUDGETS, repeats: int = 10, every: int = 4,
                 max_new_tokens: int = 128, *, progress=None) -> pd.DataFrame:
    """Per (prompt, budget, round state): the lab's verify ms and the floor's ms (medians of
    ``repeats`` interleaved pairs) and their paired ratio with a 95% interval."""
    rows = []
    with loop_ready(pair.target):  # both sides on the loops' kernels (MoE experts as grouped matmuls)
        for p in prompts:
            rows += _floor_rows(pair, p, budgets, repeats, every, max_new_tokens, progress)
    return pd.DataFrame(rows)


def _floor_rows(pair, p: int, budgets, repeats: int, every: int, max_new_tokens: int, progress) -> list[dict]:
    """``verify_floor``'s rows of prompt ``p``."""
    target, layers, mode, rows = pair.target, tuple(pair.drafter.cfg.target_layer_ids), gdn_mode("wy"), []
    for budget in budgets:
        for r, (seq, tree) in enumerate(round_states(pair, pair.prompt_ids(p), budget,
                                                     max_new_tokens=max_new_tokens, every=every)):
            rows.append({"arch": pair.arch, "prompt": p, "budget": budget, "state": r, "committed": len(seq) - 1,
                         "nodes": tree.num_nodes, **_time_pair(target, seq, tree, layers, mode, repeats)})
            if progress:
                progress(rows[-1])
    return rows


def _time_pair(target, seq: list[int], tree, layers, mode, repeats: int) -> dict:
    """``repeats`` pairs (after one warm-up pair) of the lab's verify and the floor at one state,
    in alternating order: medians and the paired ratio. The lab's cache is in the loop's steady
    state: one cache whose buffers have room, each verify forgotten (``TreeCache.discard``)
    outside the timers; the floor's ``DynamicCache`` a fresh copy per repeat."""
    cache, _ = prefill(target, seq[:-1])
    stock = DynamicCache(config=target.config)
    target(torch.as_tensor(seq[:-1])[None].to(target.device), past_key_values=stock, use_cache=True)
    times = {"lab": [], "floor": []}
    for rep in range(repeats + 1):
        copied = copy.deepcopy(stock)  # made outside the timers
        runs = {"lab": lambda: verify_batch_unchecked(target, [cache], [tree], mode, layers),
                "floor": lambda: _floor_forward(target, copied, tree, len(seq) - 1)}
        for name in (("lab", "floor") if rep % 2 else ("floor", "lab")):
            ms, _ = timed(runs[name])
            times[name].append(ms)
        cache.discard()  # the committed rows as they were, the buffers' room kept
    lab_ms, floor_ms = times["lab"][1:], times["floor"][1:]
    ratio = paired_ratio(lab_ms, floor_ms)
    return {"lab_ms": statistics.median(lab_ms), "floor_ms": statistics.median(floor_ms),
            "ratio": ratio["median"], "ratio_lo": ratio["lo"], "ratio_hi": ratio["hi"]}


def floor_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, budget): states measured, median lab and floor ms, the median of the per-state
    ratios and its 95% interval (``spread.paired_ratio`` over states)."""
    out = []
    for (arch, budget), g in rows.groupby(["arch", "budget"], sort=True):
        ratio = paired_ratio(list(g.lab_ms), list(g.floor_ms))
        out.append({"arch": arch, "budget": budget, "states": len(g), "lab_ms": g.lab_ms.median(),
                    "floor_ms": g.floor_ms.median(), "ratio": ratio["median"], "ratio_lo": ratio["lo"],
                    "ratio_hi": ratio["hi"]})
    return pd.DataFrame(out)
