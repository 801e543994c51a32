"""Your own tree (notebook 09, issue 59): tree rules of one's own beside DDTree.

A tree rule is any callable ``rule(draft, root_token, budget) -> DraftTree`` (``core.rules``);
the notebook writes its rules in cells and hands them here as objects. Three measurements:

- ``run``: one interleaved sweep (prompts the outer loop, every config of a prompt timed side by
  side) of AR, DDTree (``rules.best_first``) and every rule at every budget, T = 0: tau,
  tokens/s, speedup over the run's AR, and whether each output equals AR;
- ``lossless_table``: ``check_lossless`` of DDTree and every rule at T > 0 (the default walk,
  the rejection walk: a rule's tree drawn from the drafter's q, ``rules``);
- ``power_table``: the check against ``lossless.biased_walk(epsilon)``, a walk that cheats with
  probability epsilon: which bias the default sample count detects.

Rows are stored under the rule's key (its name plus a hash of its definition,
``sweep.stored_config``): a rule's rows never mix with DDTree's, and an edited rule gets new
rows (its old ones stay in the store, under their old key, shown by no summary of the new one).
"""
from __future__ import annotations

import pandas as pd
import torch

from ...core import lossless
from ...core.decode import first_draft
from ...core.rules import as_rule, as_walk, best_first, check_tree
from ...core.tree import accept
from ...core.verify import verify
from ..plumbing.meaning import plugin_key
from ..plumbing.results import ResultsStore
from ..plumbing.summary import summarize
from ..plumbing.sweep import AXES, EXACT_MODE, expand_grid, run_sweep

STORE = "your_tree"
RUN = "your_tree"
BUDGETS = (4, 16, 64)          # draft nodes per round of every rule
BLOCK_SIZE = 8
TEMPERATURE = 0.8              # the lossless check's
EPSILONS = (0.25, 0.5, 1.0)    # the biased walks of the power table
BUILT_IN = "DDTree"            # the display name of ``rules.best_first``
CHECK = {"method": "ddtree", "budget": 16, "block_size": BLOCK_SIZE, "temperature": TEMPERATURE}  # the checks' spec


def names(rules) -> dict:
    """{stored key: display name}: DDTree's ("unary") and each rule's (its own name)."""
    return {plugin_key(as_rule(r)): display_name(r) for r in [best_first, *rules]}


def grid(rules, archs=("gdn", "mla"), budgets=BUDGETS, block_size: int = BLOCK_SIZE,
         max_new_tokens: int = 64) -> list[dict]:
    """AR, then DDTree and every rule (objects: stored under their keys) at every budget, T = 0."""
    return expand_grid(arch=list(archs), method=["ar", "ddtree"], gdn_mode=[EXACT_MODE], budget=list(budgets),
                       block_size=[block_size], temperature=[0.0], max_new_tokens=[max_new_tokens],
                       tree=[best_first, *map(as_rule, rules)])


def run(rules, pairs: dict, prompt_ids, store: ResultsStore, *, budgets=BUDGETS, block_size: int = BLOCK_SIZE,
        max_new_tokens: int = 64, progress: bool = True) -> pd.DataFrame:
    """The interleaved sweep (resumable) of ``grid`` over ``pairs`` ({arch: Pair}) and
    ``prompt_ids``. -> its rows of these rules (an edited rule's old rows left out)."""
    configs = grid(rules, tuple(pairs), budgets, block_size, max_new_tokens)
    frame = run_sweep(configs, list(prompt_ids), store, pairs, progress=progress, run=RUN)
    return frame[frame.method.eq("ar") | frame.tree.isin(names(rules))].reset_index(drop=True)


def summary(frame: pd.DataFrame, rules) -> pd.DataFrame:
    """``summary.summarize`` per config and rule, with ``rule``: "AR", "DDTree" or the rule's name."""
    s = summarize(frame, AXES + ("tree",))
    shown = names(rules)
    return s.assign(rule=["AR" if m == "ar" else shown.get(t, t) for m, t in zip(s.method, s.tree)])


def tau_table(s: pd.DataFrame, metric: str = "tau") -> pd.DataFrame:
    """One row per (arch, budget) (the index), one column per rule: ``metric`` of the tree rows."""
    table = s[s.method == "ddtree"].pivot_table(index=["arch", "budget"], columns="rule", values=metric, sort=False)
    return table.rename_axis(columns=None)


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its p-value columns as text of two significant digits (a table rounds a
    tiny p to 0)."""
    return frame.assign(**{c: [f"{p:.2g}" for p in frame[c]] for c in frame if c.startswith("p_")})


# ----------------------------------------------------------------------------- lossless

def lossless_row(rule, pair, prompt_ids, walk="rejection", samples: int = lossless.SAMPLES,
                 positions: int = lossless.POSITIONS) -> dict:
    """``check_lossless`` of one rule (``CHECK``: DDTree-16 shapes at T = 0.8) under ``walk`` on
    ``pair``'s prompts -> {arch, rule, key, walk, temperature, samples, passed, p_value, p at
    each position, seconds}."""
    prompts = [pair.prompt_ids(i) for i in prompt_ids]
    report = lossless.check_lossless(pair.target, pair.drafter, prompts, **CHECK, tree=rule, accept_rule=walk,
                                     samples=samples, positions=positions)
    return {"arch": pair.arch, "rule": display_name(rule), "key": plugin_key(as_rule(rule)),
            "walk": as_walk(walk).name, "temperature": CHECK["temperature"], "samples": samples,
            "positions": positions, "passed": report.passed, "p_value": report.p_value,
            **{f"p_{k}": p for k, p in report.p_values.items()}, "seconds": report.seconds}


def lossless_table(rules, pair, prompt_ids, cache=None, **kwargs) -> pd.DataFrame:
    """``lossless_row`` of DDTree and every rule; cache: ``cache(name, key, compute) -> DataFrame``
    (the notebooks': ``lab.cached_table``), one table per rule keyed by ``check_key``."""
    def row(rule):
        compute = lambda: pd.DataFrame([lossless_row(rule, pair, prompt_ids, **kwargs)])  # noqa: E731
        return compute() if cache is None else cache("your_tree_lossless", check_key(rule, pair, prompt_ids, **kwargs), compute)
    return pd.concat([row(r) for r in [best_first, *rules]], ignore_index=True)


def check_key(rule, pair, prompt_ids, walk="rejection", **kwargs) -> dict:
    """What one stored check means: the rule's and the walk's keys, the models, the prompts, the
    spec and the check's settings (``kwargs``: samples, positions)."""
    return {"rule": plugin_key(as_rule(rule)), "walk": plugin_key(as_walk(walk)), "models": pair.digests, "prompts": list(prompt_ids),
            "statistic": lossless.STATISTIC, **CHECK, **kwargs}


def power_key(pair, epsilons, prompt_ids, **kwargs) -> dict:
    """What the stored power table means: the models, the biased walks, the prompts, the spec, the settings."""
    return {"models": pair.digests, "epsilons": list(epsilons), "prompts": list(prompt_ids),
            "statistic": lossless.STATISTIC, **CHECK, **kwargs}


def power_table(pair, prompt_ids, epsilons=EPSILONS, samples: int = lossless.SAMPLES,
                positions: int = lossless.POSITIONS) -> pd.DataFrame:
    """The check against ``lossless.biased_walk(epsilon)`` (``CHECK``: DDTree-16 trees): per
    epsilon, the family p-value, whether it was caught, and how often the walk cheated
    (``overrides_per_run``: its overrides over the runs)."""
    prompts, rows = [pair.prompt_ids(i) for i in prompt_ids], []
    for eps in epsilons:
        walk = lossless.biased_walk(eps)
        report = lossless.check_lossless(pair.target, pair.drafter, prompts, **CHECK, accept_rule=walk,
                                         samples=samples, positions=positions)
        rows.append({"arch": pair.arch, "epsilon": eps, "samples": samples, "positions": positions,
                     "overrides_per_run": walk.fired[0] / samples, "p_value": report.p_value,
                     "caught": not report.passed, "seconds": report.seconds})
    return pd.DataFrame(rows)


def power_text(power: pd.DataFrame) -> str:
    """The check's power in one sentence, from ``power_table``."""
    caught, missed = power[power.caught], power[~power.caught]
    n = int(power.samples.iloc[0])
    if caught.empty:
        return f"At {n} runs the check caught none of the biased walks (epsilon up to {power.epsilon.max():g})."
    low = caught.sort_values("epsilon").iloc[0]
    text = (f"At {n} runs ({int(power.positions.iloc[0])} positions each) the check catches a walk that cheats "
            f"with probability {low.epsilon:g} ({low.overrides_per_run:.2f} overrides per run; p = {low.p_value:.2g})")
    below = missed[missed.epsilon < low.epsilon]
    if len(below):
        top = below.sort_values("epsilon").iloc[-1]
        text += (f", and misses one at {top.epsilon:g} ({top.overrides_per_run:.2f} overrides per run; "
                 f"p = {top.p_value:.2g})")
    return text + "."


# ----------------------------------------------------------------------------- one round, for the widget

def display_name(rule) -> str:
    """"DDTree" for ``rules.best_first`` (or its label), else the rule's own name."""
    rule = as_rule(rule)
    return BUILT_IN if rule is best_first else rule.name


@torch.no_grad()
def first_round(rule, pair, budget: int, prompt_id: int = 0, block_size: int = BLOCK_SIZE) -> tuple:
    """(tree, accepted path, labels: each node's token as text): ``rule``'s tree (an object or a
    built-in's name) of ``budget`` draft nodes on the first round of prompt ``prompt_id``,
    checked, verified and walked at T = 0."""
    rule = as_rule(rule)
    o = first_draft(pair.target, pair.drafter, pair.prompt_ids(prompt_id), block_size)
    tree = check_tree(rule(o.draft, o.root, budget), o.root, budget, block_size - 1, pair.target.config.vocab_size,
                      f"tree rule {rule.name!r}")
    path, _ = accept(tree, verify(pair.target, o.cache, tree).logits.argmax(-1))
    return tree, path, [pair.tokenizer.decode([t]) for t in tree.tokens.tolist()]


def reading(s: pd.DataFrame) -> str:
    """Where each rule stands against DDTree at the largest budget, per target (from ``summary``)."""
    parts = []
    for arch, rows in s[s.method == "ddtree"].groupby("arch", sort=False):
        top = rows[rows.budget == rows.budget.max()].set_index("rule")
        ddtree = float(top.tau[BUILT_IN])
        others = [f"{r} {float(v):.2f} ({float(v) / ddtree:.0%})" for r, v in top.tau.items() if r != BUILT_IN]
        parts.append(f"{arch}, budget {int(rows.budget.max())}: DDTree tau {ddtree:.2f}; " + ", ".join(others))
    return "; ".join(parts) + " (tau, and its share of DDTree's)."
