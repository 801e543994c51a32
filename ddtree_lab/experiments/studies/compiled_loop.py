"""The compiled loop against the eager one, and each against AR of its own kind
(``GenerationSpec.compile``; ``scripts/bench_loop_compile.py`` stores the run).

For every prompt the configs (AR, the field's reference loop ``dflash_generate``, the lab's
DFlash and DDTree at two budgets) run eager then compiled, back to back, so each pair of a
prompt shares the machine's state. Compilation is paid before the timed run, config by config,
on the first two prompts (two lengths: the recompile with a symbolic length), so each config's
graph breaks and new graphs are its own. Rows: one per (target, config, prompt, kind) with
tokens/s (new tokens over the wall seconds), tau, whether the tokens equal the eager ones, the
load average, and the code version and both models' digests (``stored_loop_compile``).

``loop_summary``: per target and config, compiled / eager tokens/s, each kind's tokens/s over
AR of the same kind (eager over eager, compiled over compiled), and the compiled loop's over the
compiled reference loop's, as medians of per-prompt ratios with 95% intervals; graph breaks and
graphs from dynamo's counters.
"""
from __future__ import annotations

import os
import time

import pandas as pd
import torch
from torch._dynamo.utils import counters

from ...common import RESULTS_DIR
from ...core.decode import generate
from ..plumbing.meaning import SEMANTICS
from ..plumbing.results import stamp
from ..plumbing.spread import format_ratio_columns, ratio_columns
from .official import official_generate
from .round_cost import LOOP_NAMES

CONFIGS = (("ar", 1), ("dflash", 1), ("ddtree", 16), ("ddtree", 64), ("official", 1))  # the reference loop last
KINDS = ("eager", "compiled")
STORE = RESULTS_DIR / "loop_compile.csv"


def _run(pair, ids, method: str, budget: int, compiled: bool, max_new_tokens: int) -> tuple[float, list, float]:
    """One generation -> (seconds, new tokens, tau); method "official": ``dflash_generate``."""
    start = time.perf_counter()
    if method == "official":
        out = official_generate(pair.target, pair.drafter, ids, max_new_tokens, 8, compile=compiled)
        seconds, acc = time.perf_counter() - start, out["acceptance_lengths"]
        return seconds, out["tokens"], sum(acc) / max(1, len(acc))
    g = generate(pair.target, pair.drafter, ids, method=method, budget=budget, block_size=8,
                 max_new_tokens=max_new_tokens, compile=compiled)
    return time.perf_counter() - start, g.tokens, g.tau


def warm_up(pair, prompt_ids: list[list[int]], configs=CONFIGS, max_new_tokens: int = 128) -> dict:
    """Compile each config's graphs on the first two prompts (two lengths: the recompile with a
    symbolic length); -> {config: (seconds, graph breaks, new graphs)} from dynamo's counters."""
    out = {}
    for method, budget in configs:
        breaks, graphs = sum(counters["graph_break"].values()), counters["stats"].get("unique_graphs", 0)
        start = time.perf_counter()
        for ids in prompt_ids[:2]:
            _run(pair, ids, method, budget, True, max_new_tokens)
        out[method, budget] = (time.perf_counter() - start, sum(counters["graph_break"].values()) - breaks,
                               counters["stats"].get("unique_graphs", 0) - graphs)
    return out


def run_compiled_loop(pair, arch: str, prompt_ids: dict, configs=CONFIGS, max_new_tokens: int = 128,
                      progress=None) -> list[dict]:
    """The timed run over ``prompt_ids`` ({prompt id: token ids}), after ``warm_up``; -> rows.

    Dynamo runs with its defaults, as a user's would, from a clean slate per target
    (``torch._dynamo.reset``). Its recompile limit (8 graphs) counts per code object, and
    every transformers model's forward enters through one decorator's code: the reference
    loop calls the compiled target with several signatures and cache states and can fill it,
    after which new shapes run eager. Its configs come last, so the lab's AR and loops hold
    their graphs first."""
    torch._dynamo.reset()
    stamp = {"target_digest": pair.digests["target"], "drafter_digest": pair.digests["drafter"], "semantics": SEMANTICS}
    compiled = warm_up(pair, list(prompt_ids.values()), configs, max_new_tokens)
    rows = []
    for pid, ids in prompt_ids.items():
        for method, budget in configs:
            compile_s, breaks, graphs = compiled[method, budget]
            eager = None
            for kind in KINDS:
                seconds, tokens, tau = _run(pair, ids, method, budget, kind == "compiled", max_new_tokens)
                eager = tokens if eager is None else eager
                rows.append({"arch": arch, **stamp, "method": method, "budget": budget, "prompt_id": pid, "kind": kind,
                             "tokens_per_s": len(tokens) / seconds, "tau": tau, "equals_eager": tokens == eager,
                             "compile_s": compile_s, "graph_breaks": breaks, "new_graphs": graphs,
                             **stamp()})  # git, machine, date, load, threads
                if progress:
                    progress(rows[-1])
    return rows


def loop_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, method, budget): tau per kind, compiled / eager, eager / compiled over AR of
    the same kind, and compiled over the compiled reference loop (paired per prompt: medians
    with 95% intervals)."""
    wide = rows.pivot_table(index=["arch", "method", "budget", "prompt_id"], columns="kind",
                            values="tokens_per_s").reset_index()
    out = []
    for (arch, method, budget), g in wide.groupby(["arch", "method", "budget"], sort=False):
        ar = wide[(wide.arch == arch) & (wide.method == "ar")].set_index("prompt_id").loc[g.prompt_id]
        ref = wide[(wide.arch == arch) & (wide.method == "official")].set_index("prompt_id")
        vs_ref = (ratio_columns("compiled/official", g.compiled.values, ref.loc[g.prompt_id].compiled.values)
                  if set(g.prompt_id) <= set(ref.index) else {})  # a run without the reference loop: none
        r = rows[(rows.arch == arch) & (rows.method == method) & (rows.budget == budget)]
        out.append({"arch": arch, "method": method, "budget": budget, "prompts": len(g),
                    "tau": r[r.kind == "eager"].tau.mean(), "eager_tok_s": g.eager.median(),
                    "compiled_tok_s": g.compiled.median(),
                    **ratio_columns("compiled/eager", g.compiled.values, g.eager.values),
                    **ratio_columns("eager/ar", g.eager.values, ar.eager.values),
                    **ratio_columns("compiled/ar", g.compiled.values, ar.compiled.values),
                    **vs_ref,
                    "equals_eager": bool(r.equals_eager.all()), "graph_breaks": int(r.graph_breaks.max()),
                    "new_graphs": int(r.new_graphs.max()), "compile_s": float(r.compile_s.max()),
                    "load_avg_max": float(r.load_avg_1min.max())})
    return pd.DataFrame(out)


def stored_loop_compile(pairs: dict | None = None, path=STORE) -> pd.DataFrame | None:
    """The stored run's rows (``scripts/bench_loop_compile.py``) of this semantics version and of ``pairs``
    ({arch: Pair}: their weights; None: any models), or None when there are none."""
    if not path.is_file():
        return None
    rows = pd.read_csv(path)
    if not {"semantics", "target_digest", "drafter_digest"} <= set(rows.columns):
        return None  # written before rows named their semantics version and models
    keep = rows.semantics == SEMANTICS
    if pairs is not None:
        keep &= pd.Series([a in pairs and (t, d) == (pairs[a].digests["target"], pairs[a].digests["drafter"])
                           for a, t, d in zip(rows.arch, rows.target_digest, rows.drafter_digest)], index=rows.index)
    return rows[keep] if keep.any() else None


LOOP_LABELS = {"ar": "AR", **LOOP_NAMES}


def loop_display(summary: pd.DataFrame) -> pd.DataFrame:
    """``loop_summary`` for reading (README block and notebook 05): one row per loop, ratios
    as 'median [95% interval]'."""
    rows = [{"target": r.arch, "loop": LOOP_LABELS[r.method] + (f" {r.budget}" if r.method == "ddtree" else ""),
             "tau": f"{r.tau:.2f}", "eager tok/s": f"{r.eager_tok_s:.0f}", "compiled tok/s": f"{r.compiled_tok_s:.0f}",
             "compiled / eager": format_ratio_columns(r, "compiled/eager"),
             "eager vs AR": "-" if r.method == "ar" else format_ratio_columns(r, "eager/ar"),
             "compiled vs AR": "-" if r.method == "ar" else format_ratio_columns(r, "compiled/ar"),
             "compiled vs reference loop": ("-" if r.method in ("ar", "official") or pd.isna(r.get("compiled/official"))
                                            else format_ratio_columns(r, "compiled/official")),
             "compiled == eager tokens": "yes" if r.equals_eager else "**no**", "graph breaks": int(r.graph_breaks),
             "compile s": f"{r.compile_s:.0f}"} for _, r in summary.iterrows()]
    return pd.DataFrame(rows)


def loop_tables(summary: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``loop_display`` as two tables that fit a notebook column (one of 230 characters wraps):
    the timings and facts of each loop, then its ratios against AR and the reference loop."""
    shown = loop_display(summary).assign(loop=lambda d: d.loop.str.replace(" (`dflash_generate`)", "", regex=False))
    shown = shown.rename(columns={"compiled == eager tokens": "same tokens", "graph breaks": "breaks"})
    first = ["target", "loop", "tau", "eager tok/s", "compiled tok/s", "compiled / eager", "same tokens", "breaks"]
    return shown[first], shown[["target", "loop", "eager vs AR", "compiled vs AR", "compiled vs reference loop"]]


def stalled_runs(rows: pd.DataFrame, floor: float = 0.2) -> pd.DataFrame:
    """The (target, loop, prompt) whose compiled run went below ``floor`` x its own eager run: a
    recompile (or another stall) inside the timed run, not the loop's speed. Columns arch,
    method, budget, prompt_id, eager, compiled."""
    wide = rows.pivot_table(index=["arch", "method", "budget", "prompt_id"], columns="kind",
                            values="tokens_per_s").reset_index()
    return wide[wide.compiled < floor * wide.eager][["arch", "method", "budget", "prompt_id", "eager", "compiled"]]


def stall_note(rows: pd.DataFrame, floor: float = 0.2) -> str:
    """One sentence per stalled loop (``stalled_runs``): which prompts, how slow, and what it does
    to the tables: a median over prompts (tok/s) counts the stall, the median of per-prompt ratios
    barely moves, and an interval of a ratio paired with it spans it. Empty without a stall."""
    stalls = stalled_runs(rows, floor)
    lines = []
    for (arch, method, budget), g in stalls.groupby(["arch", "method", "budget"], sort=False):
        n = rows[(rows.arch == arch) & (rows.method == method) & (rows.budget == budget)].prompt_id.nunique()
        name = LOOP_LABELS[method] + (f" {budget}" if method == "ddtree" else "")
        runs = ", ".join(f"prompt {r.prompt_id}: {r.compiled:.1f} tok/s compiled vs {r.eager:.0f} eager" for r in g.itertuples())
        lines.append(f"{arch} {name}: {len(g)} of {n} prompts ran compiled below {floor}x their eager run ({runs}), a "
                     "stall inside the timed run (a recompile), not the loop's speed: its median compiled tok/s counts "
                     "them, its compiled / eager (a median of per-prompt ratios) does not, and every ratio paired with "
                     "it has an interval spanning the stall")
    return "\n".join(lines)
