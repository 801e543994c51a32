"""DDTree over DFlash 2 (issue 20): trees whose children depend on their parent token.

One interleaved run per target (``run_study``): for every prompt, AR, DFlash linear (the argmax
chain of the DFlash drafter), DFlash 2 linear (its selector's path walk) and DDTree-B over
three proposals: the DFlash drafter's marginals, the DFlash 2 drafter's unary logits alone
(``tree="unary"``), and its conditional q(c | parent token, depth) (``tree="conditional"``,
``core.conditional``), at T = 0, 0.3 and 1 (DFlash's rejection rule with the matching q).
Speedups are paired per prompt inside the run. ``run_lossless`` adds the 164-prompt T = 0
rows of the DFlash 2 configs that the goals read (lossless against the quality store's AR,
tau outside loops against its DFlash DDTree-64).

A config holds the sweep's AXES plus ``drafter`` ("dflash" | "dflash2") and ``tree``
("unary" | "conditional", a built-in tree rule's name, ``rules.TREES``: the DFlash drafter's own is "unary"):
``D_AXES``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from ...core.decode import first_draft
from ..plumbing.results import ResultsStore
from ..plumbing.spread import pooled_ratio
from ..plumbing.summary import ar_divergence, equals_ar, summarize, tag_columns
from ..plumbing.verdicts import decide
from ..plumbing.sweep import AXES, EXACT_MODE, expand_grid, run_config, run_sweep
from ...train.pair import load_pair, pairs_of_one_target
from ...common import RESULTS_DIR
from .teacher_forced import run_teacher_forced
from ...train.checkpoints import check_manifest, ckpt_path
from .calibration import record_rounds
from .calibration import continuation_ratio, continuation_summary, continuation_table, outside_loops, tau_cost
from ddtree_lab.core.rules import Conditional, Marginal
from .teacher_forced import humaneval_texts, positions_in
from tqdm.auto import tqdm
from ...core.decode import tree_rule

D_AXES = AXES + ("drafter", "tree")
BUDGETS = {0.0: (4, 16, 64, 256), 0.3: (4, 16, 64, 256), 1.0: (4, 16, 64, 256)}  # DDTree budgets per temperature
TEMPERATURES = tuple(BUDGETS)
PROPOSALS = (("dflash", "unary"), ("dflash2", "unary"), ("dflash2", "conditional"))  # (drafter, tree) of a DDTree
STORE = "dflash2"
RUN = "dflash2"                    # the interleaved budget x temperature run
LOSSLESS_RUN = "dflash2-lossless"  # the 164-prompt T = 0 rows
TF_STORE = "teacher_forced_dflash2"
# notebook 08's node-by-node recording (notebook 06's setting): prompts, DDTree budget, block, new tokens
CALIBRATION = {"prompts": 19, "budget": 64, "block": 16, "tokens": 64}


def calibration_config(drafters: dict, prompts: int, budget: int, block: int, tokens: int) -> dict:
    """The key of notebook 08's stored node table: the setting and the digests of every model."""
    return {"archs": list(drafters), "prompts": prompts, "budget": budget, "block": block, "tokens": tokens,
            "models": {a: d.digests for a, d in drafters.items()}}


@dataclass(frozen=True, eq=False)
class Drafters:
    """One target with both shipped drafters: ``pairs`` {"dflash": Pair, "dflash2": Pair}
    (``load_pair(arch, drafter=...)``). Its ``digests`` name the three models."""
    arch: str
    pairs: dict

    @property
    def digests(self) -> dict:
        return {"target": self.pairs["dflash"].target_digest, "drafter": self.pairs["dflash"].drafter_digest,
                "drafter2": self.pairs["dflash2"].drafter_digest}

    @property
    def tag(self) -> str:
        return f"{self.pairs['dflash'].tag}-{self.pairs['dflash2'].drafter_digest[:8]}"


def load_drafters(arch: str, **target_kwargs) -> Drafters:
    """The shipped target ``arch`` with both shipped drafters (``target_kwargs``: ``load_target``'s)."""
    return Drafters(arch, {d: load_pair(arch, drafter=d, **target_kwargs) for d in ("dflash", "dflash2")})


def drafters_from_dirs(target_dir, drafter_dir, drafter2_dir, **target_kwargs) -> Drafters:
    """A target of one's own with its DFlash and DFlash 2 drafters, three directories (the
    target loaded once; ``pairs_of_one_target``'s checks on each drafter). Labelled by the
    target's layer types (``models.arch_of``)."""
    dflash, dflash2 = pairs_of_one_target(target_dir, [drafter_dir, drafter2_dir], **target_kwargs)
    if getattr(dflash.drafter, "selector", None) is not None:
        raise ValueError(f"drafter_dir must hold a DFlash drafter (no candidate selector); {drafter_dir} is DFlash 2")
    if getattr(dflash2.drafter, "selector", None) is None:
        raise ValueError(f"drafter2_dir must hold a DFlash 2 drafter (with a candidate selector; "
                         f"`ddtree-lab train-drafter2` builds one); {drafter2_dir} has none")
    return Drafters(dflash.arch, {"dflash": dflash, "dflash2": dflash2})


def _with(configs: list[dict], drafter: str, tree: str) -> list[dict]:
    return [{**c, "drafter": "dflash" if c["method"] == "ar" else drafter,
             "tree": "unary" if c["method"] == "ar" else tree} for c in configs]  # AR: no tree, the default rule


def study_grid(archs=("gdn", "mla"), budgets: dict = BUDGETS, block_size: int = 8,
               max_new_tokens: int = 128) -> list[dict]:
    """Per (arch, T): AR, DFlash 1 and DFlash 2 linear, DDTree-B over every ``PROPOSALS``
    (``budgets``: {temperature: DDTree budgets})."""
    out = []
    for arch in archs:
        for t in budgets:
            common = dict(arch=[arch], temperature=[t], max_new_tokens=[max_new_tokens], gdn_mode=["wy"],
                          block_size=[block_size])
            out += _with(expand_grid(method=["ar", "dflash"], budget=[0], **common), "dflash", "unary")
            out += _with(expand_grid(method=["dflash"], budget=[0], **common), "dflash2", "conditional")
            for drafter, tree in PROPOSALS:
                out += _with(expand_grid(method=["ddtree"], budget=list(budgets[t]), **common), drafter, tree)
    return out


def lossless_grid(archs=("gdn", "mla"), max_new_tokens: int = 128) -> list[dict]:
    """T = 0, block 8: DFlash 2 linear and DDTree-64 over DFlash 2 conditional trees."""
    common = dict(arch=list(archs), temperature=[0.0], max_new_tokens=[max_new_tokens], gdn_mode=["wy"],
                  block_size=[8])
    return (_with(expand_grid(method=["dflash"], budget=[0], **common), "dflash2", "conditional")
            + _with(expand_grid(method=["ddtree"], budget=[64], **common), "dflash2", "conditional"))


def run_study_config(cfg: dict, prompt_id: int, drafters: Drafters) -> dict:
    """``sweep.run_config`` with the config's drafter (``cfg["drafter"]``) and tree."""
    return run_config(cfg, prompt_id, drafters.pairs[cfg["drafter"]])


def run_study(drafters: dict, prompt_ids, run: str = RUN, configs: list | None = None,
              store: ResultsStore | None = None) -> pd.DataFrame:
    """Run (resumably) the study grid for ``drafters`` ({arch: Drafters}) over ``prompt_ids``,
    prompts as the outer loop (one interleaved run). -> the run's rows."""
    configs = study_grid(tuple(drafters)) if configs is None else configs
    return run_sweep(configs, list(prompt_ids), store or ResultsStore(STORE), drafters,
                     runner=run_study_config, run=run)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """``summary.summarize`` over D_AXES (tau pooled, tokens/s, speedup over the run's AR,
    tau outside loops, matches_ar)."""
    return summarize(frame, D_AXES)


def prompt_tau_sums(rows: pd.DataFrame, outside_loops: bool = False) -> pd.DataFrame | None:
    """Per row of ``rows`` (a results frame, one prompt a row): ``prompt``, ``acc`` (accepted
    lengths summed over its rounds) and ``n`` (its rounds); ``outside_loops``: over the rounds
    whose output was not looping (``loops.round_tags``; None when a row was stored without loop tags)."""
    out = []
    for p, m in zip(rows["prompt"] if "prompt" in rows else range(len(rows)), rows["_metrics"]):
        flags = m.get("round_looping")
        if flags is None:
            if outside_loops:
                return None  # a row stored without loop tags: no outside-loops figure
            flags = [False] * len(m["acceptance_lengths"])
        kept = [a for a, looping in zip(m["acceptance_lengths"], flags) if not (outside_loops and looping)]
        out.append({"prompt": p, "acc": float(sum(kept)), "n": len(kept)})
    return pd.DataFrame(out, columns=["prompt", "acc", "n"])


def pooled_tau(rows: pd.DataFrame, outside_loops: bool = False) -> float:
    """Accepted tokens per target forward pooled over every round of ``rows`` (a results
    frame); ``outside_loops``: over the rounds whose output was not looping."""
    sums = prompt_tau_sums(rows, outside_loops)
    return float(sums.acc.sum() / sums.n.sum()) if sums is not None and sums.n.sum() else float("nan")


def tau_ratio(a: pd.DataFrame, b: pd.DataFrame, outside_loops: bool = False) -> dict:
    """Pooled tau of rows ``a`` over rows ``b`` (results frames), paired by prompt (the prompts
    both hold), with its 95% interval over prompts (``spread.pooled_ratio``)."""
    sa, sb = prompt_tau_sums(a, outside_loops), prompt_tau_sums(b, outside_loops)
    if sa is None or sb is None:
        return {"ratio": float("nan"), "lo": float("nan"), "hi": float("nan"), "prompts": 0}
    both = sa.merge(sb, on="prompt", suffixes=("_a", "_b"))
    return pooled_ratio(both.acc_a, both.n_a, both.acc_b, both.n_b)


def goal_table(lossless: pd.DataFrame, quality: pd.DataFrame) -> pd.DataFrame:
    """Per arch, T = 0, block 8, 164 prompts: DDTree-64 tau (all rounds / outside loops) over
    DFlash 2 conditional trees (``lossless`` rows) against over DFlash 1 marginals
    (the quality store's rows), DFlash 1 / 2 linear, and the share of prompts equal to AR (the
    quality store's AR), and the loop lens's columns beside (``summary.TAG_COLUMNS``: the looping
    and copyable shares, tau in clean rounds...). Tau only: no timing crosses the two runs. The conditional row also
    holds ``gain`` (its tau outside loops over DDTree-64 over the marginals', paired by prompt)
    and ``gain_lo`` / ``gain_hi``, its 95% interval over prompts. Empty without rows."""
    rows = []
    if quality.empty or lossless.empty:
        return pd.DataFrame(columns=["arch", "config", "prompts", "matches_ar", "tau", "tau_outside_loops", "gain",
                                     "gain_lo", "gain_hi"])
    quality = quality[(quality.temperature == 0) & (quality.max_new_tokens.isin(set(lossless.max_new_tokens)))]
    for arch in sorted(set(lossless.arch)):
        picks = {"dflash": quality[(quality.arch == arch) & (quality.method == "dflash") & (quality.block_size == 8)],
                 "ddtree64": quality[(quality.arch == arch) & (quality.method == "ddtree") & (quality.budget == 64)
                                     & (quality.gdn_mode == EXACT_MODE)]}
        mine = lossless[lossless.arch == arch]
        picks |= {"dflash2": mine[mine.method == "dflash"],
                  "ddtree64_conditional": mine[(mine.method == "ddtree") & (mine.tree == "conditional")]}
        gain = tau_ratio(picks["ddtree64_conditional"], picks["ddtree64"], outside_loops=True)
        for name, r in picks.items():
            same = [equals_ar(d) for d in ar_divergence(r, quality, key=("arch", "max_new_tokens"))]
            rows.append({"arch": arch, "config": name, "prompts": len(r),
                         "matches_ar": float(pd.Series(same, dtype=float).mean()),
                         "tau": pooled_tau(r), "tau_outside_loops": pooled_tau(r, outside_loops=True),
                         **{k: v for k, v in tag_columns(r["_metrics"]).items() if k != "tau_outside_loops"},
                         **({"gain": gain["ratio"], "gain_lo": gain["lo"], "gain_hi": gain["hi"]}
                            if name == "ddtree64_conditional" else {})})
    return pd.DataFrame(rows)


def run_dflash2(archs=("gdn", "mla"), study_prompts: int = 6, lossless_prompts: int = 164,
                tf_problems: int = 12, *, drafters: dict | None = None, directory=None, budgets: dict = BUDGETS,
                max_new_tokens: int = 128, verbose: bool = True) -> dict:
    """Every stored measurement of this study (resumable): the interleaved run on
    ``study_prompts`` prompts, the 164-prompt lossless rows, the teacher-forced lens of the
    DFlash 2 drafter (conditional and unary trees) on ``tf_problems`` canonical solutions.
    drafters: {label: Drafters} (``drafters_from_dirs``: a target of one's own; its rows belong
    in their own directory); None: the shipped ones of ``archs``. Prompts past a pair's own
    prompt set are left out. directory: where the stores live (default data/results;
    notebooks' SMOKE runs: smoke/).
    -> {"study", "lossless": results frames of the two runs, "teacher_forced": tf_summary}."""
    directory = RESULTS_DIR if directory is None else directory
    drafters = {a: load_drafters(a) for a in archs} if drafters is None else drafters
    archs = tuple(drafters)
    available = min(d.pairs["dflash"].num_prompts for d in drafters.values())
    study_prompts, lossless_prompts = min(study_prompts, available), min(lossless_prompts, available)
    store = ResultsStore(STORE, directory)
    study = run_study(drafters, range(study_prompts), store=store,
                      configs=study_grid(tuple(archs), budgets, max_new_tokens=max_new_tokens))
    lossless = run_sweep(lossless_grid(tuple(archs), max_new_tokens), list(range(lossless_prompts)), store,
                         drafters, runner=run_study_config, run=LOSSLESS_RUN)
    tf = run_teacher_forced({a: d.pairs["dflash2"] for a, d in drafters.items()}, ResultsStore(TF_STORE, directory),
                            range(tf_problems), trees=("conditional", "unary"))
    if verbose:
        with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
            print(summary(study)[["arch", "method", "drafter", "tree", "budget", "temperature", "tau",
                                  "tau_outside_loops", "tokens_per_s", "speedup", "matches_ar"]].to_string(index=False))
            print(tf.to_string(index=False))
    return {"study": study, "lossless": lossless, "teacher_forced": tf}


# ----------------------------------------------------------------------------- reading

def drafter_table(archs=("gdn", "mla")) -> pd.DataFrame:
    """Per arch, from the shipped manifests (held-out greedy rollouts, block 8): DFlash linear
    tau, DFlash 2 linear tau of its unary argmax path and of its selector's path walk, the
    unary top-K recall and the teacher-forced selector accuracy, train minutes."""
    rows = []
    for arch in archs:
        d1, d2 = check_manifest(ckpt_path(arch, "drafter")), check_manifest(ckpt_path(arch, "drafter2"))
        rows.append({"arch": arch, "dflash_tau": d1["tau_block8"], "dflash2_unary_tau": d2["unary_tau_block8"],
                     "dflash2_selector_tau": d2["selector_tau_block8"], "unary_recall": d2["unary_recall_block8"],
                     "selector_accuracy": d2["selector_accuracy_block8"],
                     "dflash2_train_min": d2["train_time_s"] / 60})
    return pd.DataFrame(rows)


def record_proposals(drafters: Drafters, *, prompts: int, budget: int, block: int, tokens: int) -> pd.DataFrame:
    """``calibration.record_rounds`` of one target with each of its drafters' own trees (the
    DFlash drafter's marginal tree, the DFlash 2 drafter's conditional tree), labelled by
    ``proposal`` and ``arch``: what ``sibling_table`` reads."""
    kw = dict(budget=budget, block_size=block, max_new_tokens=tokens, arch=drafters.arch)
    return pd.concat([record_rounds(drafters.pairs["dflash"], range(prompts), proposal="DFlash marginal", **kw),
                      record_rounds(drafters.pairs["dflash2"], range(prompts), proposal="DFlash 2 conditional", **kw)])


def sibling_table(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, proposal), outside loops, pooled over depths: the observed chance to go on
    right after a rank >= 1 sibling and on the main path, their ratio, the surrogate's
    expected and the observed accepted tokens per round (calibration). nodes: ``record_rounds``
    rows with ``arch`` and ``proposal`` labels. ``ratio_lo`` / ``ratio_hi``: the ratio's 95%
    interval over prompts (``calibration.continuation_ratio``)."""
    rows = []
    for (arch, proposal), g in nodes.groupby(["arch", "proposal"], sort=False):
        out = outside_loops(g)
        spread = continuation_ratio(out)
        pooled = continuation_summary(continuation_table(out)).set_index("group")
        main, sib = (pooled.observed.get(k, float("nan")) for k in ("main_path", "after_sibling"))
        cost = tau_cost(out)
        rows.append({"arch": arch, "proposal": proposal, "main_path": main, "after_sibling": sib,
                     "ratio": sib / main if main else float("nan"), "ratio_lo": spread["lo"], "ratio_hi": spread["hi"],
                     "after_sibling_nodes": int(pooled["count"].get("after_sibling", 0)),
                     "predicted_per_round": cost["predicted"], "observed_per_round": cost["observed"],
                     "observed_over_predicted": cost["ratio"]})
    return pd.DataFrame(rows)


def tau_grid(summary_frame: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """One temperature's tau as a small table: rows arch x budget, columns per proposal
    ("DFlash" marginals, "DFlash 2 unary", "DFlash 2 conditional"); budget 7 = the linear
    draft (DFlash / the selector's path)."""
    s = summary_frame[(summary_frame.temperature == temperature) & (summary_frame.method != "ar")]
    name = {("dflash", "unary"): "DFlash", ("dflash2", "unary"): "DFlash 2 unary",
            ("dflash2", "conditional"): "DFlash 2 conditional"}
    s = s.assign(proposal=[name[(d, t)] for d, t in zip(s.drafter, s.tree)],
                 budget=["linear" if m == "dflash" else int(b) for m, b in zip(s.method, s.budget)])
    return s.pivot_table(index=["arch", "budget"], columns="proposal", values="tau", sort=False)[list(
        dict.fromkeys(v for v in name.values() if v in set(s.proposal)))]


def _temperature_ratios(study: pd.DataFrame, budget: int = 64, frame: pd.DataFrame | None = None) -> list[dict]:
    """Per (arch, T) of the run: DDTree-``budget`` tau over DFlash 2 conditional and DFlash
    marginals, with its 95% interval over prompts when the run's rows (``frame``) are given."""
    out = []
    for (arch, t), r in study[(study.method == "ddtree") & (study.budget == budget)].groupby(["arch", "temperature"]):
        cond, marg = r[r.tree == "conditional"], r[r.drafter == "dflash"]
        if len(cond) and len(marg):
            spread = {"lo": float("nan"), "hi": float("nan")}
            if frame is not None:
                pick = frame[(frame.arch == arch) & (frame.temperature == t) & (frame.method == "ddtree")
                             & (frame.budget == budget)]
                spread = tau_ratio(pick[pick.tree == "conditional"], pick[pick.drafter == "dflash"])
            out.append({"arch": arch, "temperature": t, "conditional": float(cond.tau.iloc[0]),
                        "marginal": float(marg.tau.iloc[0]), "ratio": float(cond.tau.iloc[0] / marg.tau.iloc[0]),
                        "lo": spread["lo"], "hi": spread["hi"], "prompts": int(cond.n_prompts.iloc[0])})
    return out


def _verdict(lo: float, hi: float, threshold: float = 1.0) -> str:
    """'above' / 'below' / 'tie': the lab's one rule (``plumbing.verdicts.decide``, the interval as
    printed), so '[1.00, 1.55]' and '[0.77, 1.00]' are both ties, never a win and a tie."""
    return decide(lo, hi, threshold)


def reading(sib: pd.DataFrame, goals: pd.DataFrame, study: pd.DataFrame | None = None,
            frame: pd.DataFrame | None = None) -> str:
    """The notebook's reading, written from the numbers it printed (never typed in by hand);
    ``study``: the run's ``summary``, for DDTree-64 conditional vs marginal at every temperature,
    with intervals over prompts from the run's rows (``frame``); every ratio unrounded enough,
    with its interval, and a ratio whose interval holds its threshold called a tie."""
    lines = []
    for r in [] if study is None else _temperature_ratios(study, frame=frame):
        side = _verdict(r["lo"], r["hi"])
        spread = "" if pd.isna(r["lo"]) else f" [{r['lo']:.2f}, {r['hi']:.2f}]"
        word = {"above": "conditional trees win here", "below": "conditional trees lose here",
                "tie": "a tie: the interval holds 1"}[side]
        lines.append(f"{r['arch']}, T = {r['temperature']:g} ({r['prompts']} prompts, all rounds): DDTree-64 tau "
                     f"{r['conditional']:.3f} conditional vs {r['marginal']:.3f} marginal ({r['ratio']:.3f}x{spread}: {word}).")
    for arch in dict.fromkeys(sib.arch):
        s = sib[sib.arch == arch].set_index("proposal")
        if {"DFlash marginal", "DFlash 2 conditional"} <= set(s.index):
            m, c = s.loc["DFlash marginal"], s.loc["DFlash 2 conditional"]
            lines.append(f"{arch}: after a sibling the walk goes on {c.after_sibling:.4f} of the time with conditional "
                         f"trees against {m.after_sibling:.4f} with marginal ones (main path {c.main_path:.4f} / "
                         f"{m.main_path:.4f}; ratio {c.ratio:.4f} vs {m.ratio:.4f}); the surrogate's accepted tokens "
                         f"per round are {c.observed_over_predicted:.2f}x observed/predicted (marginal "
                         f"{m.observed_over_predicted:.2f}x).")
    if len(goals):
        for arch, g in goals.groupby("arch"):
            t = g.set_index("config")
            if {"ddtree64", "ddtree64_conditional"} <= set(t.index):
                c = t.loc["ddtree64_conditional"]
                r = c.tau_outside_loops / t.loc["ddtree64"].tau_outside_loops
                lo, hi = c.get("gain_lo", float("nan")), c.get("gain_hi", float("nan"))
                helps = {"above": "helps", "below": "does not help", "tie": "is not told apart from no gain"}[_verdict(lo, hi)]
                goal = {"above": "above the 1.15x goal", "below": "below the 1.15x goal",
                        "tie": "the 1.15x goal inside its interval: not told apart"}[_verdict(lo, hi, 1.15)]
                spread = "" if pd.isna(lo) else f" [{lo:.2f}, {hi:.2f}]"
                lines.append(f"{arch} ({int(c.prompts)} prompts): DDTree-64 outside loops at T = 0, conditional over "
                             f"DFlash 2 vs marginal over DFlash: {c.tau_outside_loops:.4f} vs "
                             f"{t.loc['ddtree64'].tau_outside_loops:.4f} ({r:.4f}x{spread}): the selector {helps}, {goal}.")
    return "Reading.\n" + "\n".join(lines) if lines else "Reading: nothing to read (no rows)."


# ----------------------------------------------------------------------------- why T = 1 differs

OVERLAP_TEMPERATURES = (0.3, 0.6, 1.0)


@torch.no_grad()
def overlap_at(drafters: Drafters, text: list[int], position: int, temperatures=OVERLAP_TEMPERATURES,
               depths: int = 3, block_size: int = 8) -> list[dict]:
    """At one real context text[:position+1], per depth d <= ``depths`` and temperature T: the
    overlap sum_x min(p_T(x), q_T(x)) = 1 - TV(p_T, q_T) of the target's next-token
    distribution p_T after the REAL text up to depth d - 1 and each proposal's q_T given the
    same real parent. Under DFlash's rejection rule a token drawn from q is accepted with
    probability exactly this overlap (arXiv 2602.06036, section 3): the first-token acceptance
    the proposal can reach at T, whatever its tree. Proposals: the DFlash drafter's marginal,
    the DFlash 2 drafter's unary marginal and its conditional q (the selector given the parent)."""
    ctx = torch.as_tensor(text[:position + 1])
    target = drafters.pairs["dflash"].target
    logits = target(torch.as_tensor(text[:position + depths])[None].to(target.device)).logits[0, position:]  # [depths, V]
    proposals = {}
    for name in ("dflash", "dflash2"):
        pair = drafters.pairs[name]
        draft = first_draft(pair.target, pair.drafter, ctx, block_size).draft
        proposals["DFlash marginal" if name == "dflash" else "DFlash 2 unary"] = Marginal(draft.logits)
        if name == "dflash2":
            proposals["DFlash 2 conditional"] = Conditional(draft.conditional)
    rows = []
    for d in range(1, depths + 1):
        parent = int(text[position + d - 1])
        for T in temperatures:
            p = torch.softmax(logits[d - 1].double().cpu() / T, -1)
            for proposal, q in proposals.items():
                overlap = float(torch.minimum(p, q.child_probs(parent, d, T).double().cpu()).sum())
                rows.append({"depth": d, "temperature": T, "proposal": proposal, "overlap": overlap})
    return rows


def _positions(d: Drafters, problem_ids, stride: int, lookahead: int, block_size: int) -> list[tuple]:
    """(text, position) of every ``stride``-th position of the HumanEval canonical solutions
    ``problem_ids`` that leaves ``lookahead`` real tokens and a block inside the models' positions."""
    texts, starts = humaneval_texts(d.pairs["dflash"].tokenizer, list(problem_ids))
    limit = min(d.pairs["dflash"].target.config.max_position_embeddings, d.pairs["dflash2"].drafter.cfg.max_positions)
    return [(t, p) for t, s in zip(texts, starts)
            for p in positions_in(min(len(t), limit - block_size - 1), s, stride, lookahead)]


def overlap_table(drafters: dict, problem_ids, *, temperatures=OVERLAP_TEMPERATURES, depths: int = 3,
                  block_size: int = 8, stride: int = 16, progress: bool = True) -> pd.DataFrame:
    """``overlap_at`` over HumanEval canonical solutions (every ``stride`` positions), per
    target ({arch: Drafters}) -> mean overlap per (arch, proposal, temperature, depth) with the
    number of positions."""
    rows = []
    for arch, d in drafters.items():
        for t, p in tqdm(_positions(d, problem_ids, stride, depths, block_size), desc=f"overlap {arch}",
                         disable=not progress):
            rows += [{"arch": arch, **r} for r in overlap_at(d, t, p, temperatures, depths, block_size)]
    frame = pd.DataFrame(rows)
    return (frame.groupby(["arch", "proposal", "temperature", "depth"], sort=False)
            .overlap.agg(overlap="mean", positions="size").reset_index())


@torch.no_grad()
def tree_shapes(drafters: dict, problem_ids, *, budget: int = 64, block_size: int = 8, stride: int = 16,
                progress: bool = True) -> pd.DataFrame:
    """The shape of the DDTree-``budget`` tree each proposal builds at real contexts (HumanEval
    canonical solutions, every ``stride`` positions): mean children of the root (the first
    token's siblings, what covers a spread target at T > 0) and mean depth of the deepest
    node, per (arch, proposal)."""
    rows = []
    for arch, d in drafters.items():
        for t, p in tqdm(_positions(d, problem_ids, stride, 1, block_size), desc=f"tree shapes {arch}",
                         disable=not progress):
            for name, tree in (("DFlash marginal", None), ("DFlash 2 unary", "unary"), ("DFlash 2 conditional", "conditional")):
                pair = d.pairs["dflash" if tree is None else "dflash2"]
                o = first_draft(pair.target, pair.drafter, t[:p + 1], block_size)
                built = tree_rule(pair.drafter, tree)(o.draft, o.root, budget)
                rows.append({"arch": arch, "proposal": name, "root_children": len(built.children[0]),
                             "max_depth": int(built.depths.max())})
    return pd.DataFrame(rows).groupby(["arch", "proposal"], sort=False).mean().reset_index()


def t1_reading(overlap: pd.DataFrame, shapes: pd.DataFrame) -> str:
    """The sentence notebook 08 prints under its T = 1 tables, from their numbers."""
    def ov(arch, proposal, T, depth):
        r = overlap[(overlap.arch == arch) & (overlap.proposal == proposal) & (overlap.temperature == T)
                    & (overlap.depth == depth)].overlap
        return float(r.iloc[0]) if len(r) else float("nan")
    lines = []
    for arch in shapes.arch.unique():
        s = shapes[shapes.arch == arch].set_index("proposal")
        T = max(overlap.temperature)
        lines.append(
            f"{arch}: at T = {T:g} one draw from the conditional q is accepted with probability "
            f"{ov(arch, 'DFlash 2 conditional', T, 1):.2f} at depth 1 (unary marginal: {ov(arch, 'DFlash 2 unary', T, 1):.2f})"
            f" and {ov(arch, 'DFlash 2 conditional', T, 2):.2f} at depth 2 given the true parent (unary: "
            f"{ov(arch, 'DFlash 2 unary', T, 2):.2f}); the conditional tree gives the root "
            f"{s.root_children.get('DFlash 2 conditional', float('nan')):.1f} children (at most the selector's K) and goes "
            f"{s.max_depth.get('DFlash 2 conditional', float('nan')):.1f} deep, where the marginal tree gives it "
            f"{s.root_children.get('DFlash marginal', float('nan')):.1f} and goes "
            f"{s.max_depth.get('DFlash marginal', float('nan')):.1f} deep.")
    T = max(overlap.temperature)
    shape_only = all(ov(a, "DFlash 2 conditional", T, 1) >= 0.9 * ov(a, "DFlash 2 unary", T, 1)
                     and float(shapes[(shapes.arch == a) & (shapes.proposal == "DFlash 2 conditional")].root_children.iloc[0])
                     < 0.5 * float(shapes[(shapes.arch == a) & (shapes.proposal == "DFlash marginal")].root_children.iloc[0])
                     for a in shapes.arch.unique())
    verdict = ("So one draw is as good, and the loss at T = 1 is the tree's shape: the selector's q is sharp, the "
               "best-first search spends the budget on depth (what pays at T = 0), and at T = 1 the first token is a "
               "draw from a spread target that only many siblings of the root cover." if shape_only else
               "These numbers do not single out the tree's shape: the conditional q itself is a worse first draw here.")
    return "\n".join(lines) + "\n" + verdict
