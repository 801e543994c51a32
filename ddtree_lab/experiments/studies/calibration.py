"""Drafter calibration: the DDTree surrogate against what the target accepts (DDTree, arXiv
2604.12989, section 3; CaDDTree, arXiv 2606.01813; docs/background.md sections 3 and 5).

The surrogate scores a draft node u by q(u), the product of the drafter's per-depth
marginals along u's path, and assumes a node given its parent is accepted with probability
q_cond(u) = q(u) / q(parent), the drafter's marginal of u's token at u's depth. The
marginals ignore siblings: a rank-1 branch is only tried where the rank-0 token failed,
so its real accept rate can sit far below q_cond. ``RoundRecorder`` logs every draft node of
every round of ``decode.generate(..., on_round=recorder)``, tagged by whether the output
before the round was looping (``loops.is_looping``); the tables compare prediction
and observation by depth, by sibling rank and in reliability bins, and
``continuation_table`` measures how often the walk goes on after a sibling, outside loops.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...core.decode import generate
from ddtree_lab.core.rules import Marginal
from ...train.loops import is_looping
from ..plumbing.spread import pooled_ratio

COLUMNS = ("round", "node", "parent", "depth", "rank", "main_path", "q_cond", "q_path", "reached", "accepted",
           "in_loop")


def sibling_ranks(parents: list[int], q_cond: list[float]) -> list[int]:
    """Rank of each node among its parent's children by q_cond descending (ties: lower
    index first); the root gets 0."""
    ranks = [0] * len(parents)
    kids: dict[int, list[int]] = {}
    for node in range(1, len(parents)):
        kids.setdefault(parents[node], []).append(node)
    for siblings in kids.values():
        for r, node in enumerate(sorted(siblings, key=lambda n: (-q_cond[n], n))):
            ranks[node] = r
    return ranks


class RoundRecorder:
    """``on_round`` callback: one row per draft node per speculative round.

    q_cond: the drafter's probability of the node's token given its parent (DFlash: its
    depth's marginal, softmax of the round's draft logits; DFlash 2 conditional trees: the
    selector's q(token | parent token, depth), ``Round.proposal``), q_path: product of q_cond along the path (= exp(log weight) for
    a DDTree tree), main_path: the node and all its ancestors are rank 0, reached: the
    parent is on the accepted path, accepted: the node is, in_loop: the output committed so far
    was looping when the round started (``loops.is_looping``; None when the recorder was not
    told the prompt: call ``start(prompt_ids, **labels)`` before each run).
    ``labels`` (a dict) is copied into every row, e.g. ``rec.labels = {"prompt": 3}``.
    """

    def __init__(self, **labels):
        self.labels = labels
        self.rows: list[dict] = []
        self.rounds = 0
        self.context: list[int] | None = None
        self.prompt_len = 0

    def start(self, prompt_ids, **labels) -> None:
        """A new generation from ``prompt_ids``: rounds are loop-tagged from its output on."""
        self.labels, self.context, self.prompt_len = labels, [int(t) for t in prompt_ids], len(prompt_ids)

    def __call__(self, rnd) -> None:
        tree = rnd.tree
        proposal = rnd.proposal if getattr(rnd, "proposal", None) is not None else Marginal(rnd.draft_logits)
        parents, depths = tree.parents.tolist(), tree.depths.tolist()
        node_lq = proposal.node_log_q(tree)  # the drafter's q of each node given its parent
        path_lq = [0.0] * len(tree)
        for i in range(1, len(tree)):  # topological order: the parent is already done
            path_lq[i] = path_lq[parents[i]] + node_lq[i]
        q_cond = np.exp(node_lq).tolist()
        ranks = sibling_ranks(parents, q_cond)
        main = [True] + [False] * (len(tree) - 1)  # every node on the way is its parent's rank 0
        for i in range(1, len(tree)):
            main[i] = main[parents[i]] and ranks[i] == 0
        on_path = set(rnd.path)
        in_loop = None if self.context is None else is_looping(self.context[self.prompt_len:])
        for i in range(1, len(tree)):
            self.rows.append({**self.labels, "round": self.rounds, "node": i, "parent": parents[i],
                              "depth": depths[i],
                              "rank": ranks[i], "main_path": main[i], "q_cond": q_cond[i], "q_path": float(np.exp(path_lq[i])),
                              "reached": parents[i] in on_path, "accepted": i in on_path, "in_loop": in_loop})
        if self.context is not None:  # what the round committed: the accepted draft tokens and the bonus
            self.context += tree.tokens[rnd.path[1:]].tolist() + [int(rnd.bonus)]
        self.rounds += 1

    def frame(self) -> pd.DataFrame:
        """Columns: labels..., round, node, parent, depth, rank, main_path, q_cond, q_path,
        reached, accepted, in_loop."""
        return pd.DataFrame(self.rows, columns=list(self.labels) + list(COLUMNS))


def _rank_bucket(rank: pd.Series) -> pd.Series:
    return rank.clip(upper=3).map({0: "0", 1: "1", 2: "2", 3: "3+"})


def calibration_table(frame: pd.DataFrame, by: str = "depth", bins: int = 10) -> pd.DataFrame:
    """Predicted vs observed accept rate of reached nodes (parent accepted).

    by: "depth", "rank" (sibling rank 0, 1, 2, 3+) or "bins" (``bins`` equal-width bins of
    q_cond on [0, 1]: a reliability diagram). Columns: the group (depth | rank | bin, plus
    bin_low and bin_high for bins), predicted (mean q_cond), observed (accept rate), count.
    """
    reached = frame[frame["reached"]]
    if by == "depth":
        key = reached["depth"].rename("depth")
    elif by == "rank":
        key = _rank_bucket(reached["rank"]).rename("rank")
    elif by == "bins":
        key = np.minimum((reached["q_cond"] * bins).astype(int), bins - 1).rename("bin")
    else:
        raise ValueError(f"by must be 'depth', 'rank' or 'bins', got {by!r}")
    table = (reached.groupby(key).agg(predicted=("q_cond", "mean"), observed=("accepted", "mean"),
                                      count=("accepted", "size")).reset_index())
    if by == "bins":
        table.insert(1, "bin_low", table["bin"] / bins)
        table.insert(2, "bin_high", (table["bin"] + 1) / bins)
    return table


def surrogate_gap(frame: pd.DataFrame) -> pd.DataFrame:
    """The sibling-conditioning gap: reached rank-0 (main path) vs rank-1+ (branch) nodes.

    Rows "rank0", "rank1+"; columns group, predicted (mean q_cond), observed (accept rate),
    gap (predicted - observed), count.
    """
    reached = frame[frame["reached"]]
    group = np.where(reached["rank"] == 0, "rank0", "rank1+")
    table = reached.groupby(group).agg(predicted=("q_cond", "mean"), observed=("accepted", "mean"),
                                       count=("accepted", "size"))
    table = table.reindex(["rank0", "rank1+"]).rename_axis("group").reset_index()
    table.insert(3, "gap", table["predicted"] - table["observed"])
    return table


def tau_cost(frame: pd.DataFrame) -> dict:
    """Accepted draft tokens per round: the surrogate's expectation (sum of q_path over the
    round's nodes) vs the observed count, averaged over rounds.

    Returns {rounds, predicted, observed, ratio (observed / predicted)}; tau = accepted + 1.
    """
    keys = [c for c in frame.columns if c not in COLUMNS] + ["round"]  # labels separate runs
    per_round = frame.groupby(keys, dropna=False).agg(predicted=("q_path", "sum"),
                                                      observed=("accepted", "sum"))
    predicted, observed = float(per_round["predicted"].mean()), float(per_round["observed"].mean())
    return {"rounds": len(per_round), "predicted": predicted, "observed": observed,
            "ratio": observed / predicted if predicted > 0 else float("nan")}


def outside_loops(frame: pd.DataFrame, looping: bool = False) -> pd.DataFrame:
    """The rows of rounds whose context was not looping (``looping=True``: was looping);
    rounds of unknown context (in_loop None) are in neither."""
    if "in_loop" not in frame:
        raise ValueError("the frame has no in_loop column: record it with RoundRecorder.start(prompt_ids)")
    return frame[frame["in_loop"].astype(object).eq(looping)]


def continuation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """After an accepted node at depth d: is depth d + 1 accepted too, by where the node sits?

    The measurement public engines report for sibling conditioning (docs/background.md
    section 8): right after an accepted rank >= 1 sibling ("after_sibling") the drafter's
    next marginals were made for the rank-0 token, so the walk may stop far more often than
    on the main path ("main_path": every node so far rank 0). predicted = the surrogate's
    chance to go on (sum of q_cond of the node's children in the tree); observed = the rate
    at which one of them is accepted. Accepted nodes without children in the tree are left
    out (the walk cannot go on there). Columns: depth, group, predicted, observed, count.
    Outside loops: ``continuation_table(outside_loops(frame))``.
    """
    if frame.empty:
        return pd.DataFrame(columns=["depth", "group", "predicted", "observed", "count"])
    keys = [c for c in frame.columns if c not in COLUMNS] + ["round"]
    kids = frame.groupby(keys + ["parent"], dropna=False).agg(go_on=("accepted", "any"), q_next=("q_cond", "sum"))
    acc = frame[frame["accepted"]].merge(kids, left_on=keys + ["node"], right_index=True, how="inner")
    group = np.where(acc["main_path"], "main_path", np.where(acc["rank"] >= 1, "after_sibling", "after_branch"))
    return (acc.assign(group=group).groupby(["depth", "group"])
            .agg(predicted=("q_next", "mean"), observed=("go_on", "mean"), count=("go_on", "size"))
            .reset_index())


def continuation_summary(table: pd.DataFrame) -> pd.DataFrame:
    """``continuation_table`` pooled over depths, per group: predicted and observed weighted by
    count. Columns: group, predicted, observed, count (groups absent from ``table`` left out)."""
    t = table.assign(_p=table["predicted"] * table["count"], _o=table["observed"] * table["count"])
    out = t.groupby("group").agg(_p=("_p", "sum"), _o=("_o", "sum"), count=("count", "sum")).reset_index()
    out["predicted"], out["observed"] = out["_p"] / out["count"], out["_o"] / out["count"]
    return out[["group", "predicted", "observed", "count"]]


def continuation_ratio(frame: pd.DataFrame) -> dict:
    """The after-sibling continuation rate over the main path's, pooled over prompts as
    ``continuation_summary`` pools it, with its 95% interval over prompts (``spread.pooled_ratio``:
    nodes of one prompt are not independent, so prompts are what is resampled). frame:
    ``record_rounds`` rows of one run (already ``outside_loops`` where wanted) with ``prompt``.
    -> {ratio, lo, hi, prompts} (NaN where a group has no node)."""
    sums = []
    for _, g in frame.groupby("prompt"):
        t = continuation_table(g).set_index("group")
        went = (t["observed"] * t["count"]).groupby(level=0).sum()
        n = t["count"].groupby(level=0).sum()
        sums.append([went.get("after_sibling", 0.0), n.get("after_sibling", 0), went.get("main_path", 0.0),
                     n.get("main_path", 0)])
    if not sums or not sum(s[1] for s in sums) or not sum(s[3] for s in sums):
        return {"ratio": float("nan"), "lo": float("nan"), "hi": float("nan"), "prompts": len(sums)}
    return pooled_ratio(*np.asarray(sums, dtype=float).T)


def record_rounds(pair, prompt_ids, *, budget: int, block_size: int, max_new_tokens: int,
                  tree: str | None = None, **labels) -> pd.DataFrame:
    """``calibration.RoundRecorder`` rows (one per draft node per round, loop-tagged) of DDTree-
    ``budget`` decoding of ``prompt_ids`` with ``pair`` (``tree``: as ``decode.generate``);
    ``labels`` go into every row, with ``prompt``."""
    rec = RoundRecorder()
    for p in prompt_ids:
        ids = pair.prompt_ids(p)
        rec.start(ids, **labels, prompt=p)
        generate(pair.target, pair.drafter, ids, method="ddtree", budget=budget, block_size=block_size,
                 max_new_tokens=max_new_tokens, on_round=rec, tree=tree)
    return rec.frame()
