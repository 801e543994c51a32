"""Acceptance on real text, teacher-forced: the lens no repetition loop can touch.

At a position p of real code (a HumanEval canonical solution, a held-out corpus file) the
context is the REAL text[:p+1]; the drafter proposes one block from it, a tree is built,
the target verifies it once, and the accepted length is what the target's own greedy
choices along the tree accept (the accept walk of DDTree, arXiv 2604.12989 section 4).
The text itself is never the reference: only the context is real, so a model that would
loop when free-running is measured on text it did not write.

One verify per position serves every budget: the tree is built once at the largest budget
and every smaller budget is a prefix of it (pop order, ``tree.truncate``); in an exact
verification mode a node's logits depend on its ancestors only, so the prefix's choices are
the full tree's first rows. The chain (DFlash) is verified on its own.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from ...core import tree as tree_mod
from ...core.decode import first_draft, tree_rule
from ddtree_lab.core.spec import gdn_mode as as_gdn_mode
from ...core.verify import GDN_MODES, verify
from ..plumbing.sweep import EXACT_MODE
from ...train.data import humaneval_problems
from ..plumbing.sweep import run_sweep


def positions_in(text_len: int, start: int, stride: int, lookahead: int) -> list[int]:
    """Positions p in [start, text_len - 1 - lookahead] every ``stride`` tokens: the root is
    text[p]; ``lookahead`` keeps the drafted block inside the model's context."""
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    return list(range(max(start, 1), text_len - lookahead, stride))


def _draft_at(target, drafter, context: torch.Tensor, block_size: int):
    """The target's cache of context[:-1], the root context[-1], and the drafter's block
    (``drafter.Draft``) from that context (``decode.first_draft``)."""
    o = first_draft(target, drafter, context, block_size)
    return o.cache, o.root, o.draft


@torch.no_grad()
def accepted_at(target, drafter, context: torch.Tensor, budgets: Sequence[int], block_size: int,
                gdn_mode: str = "wy", *, tree: str | None = None) -> dict:
    """Acceptance lengths (accepted drafts + 1) at one real context [p+1] (last token = root).
    tree: as ``decode.generate`` (a DFlash 2 drafter: conditional trees and its selector's chain).

    -> {"dflash": int, budget b: int for b in budgets}
    """
    rule = tree_rule(drafter, tree)
    cache, root, draft = _draft_at(target, drafter, context, block_size)
    out = {}
    chain = rule.chain(draft, root, block_size - 1)
    out["dflash"] = len(tree_mod.accept(chain, verify(target, cache.snapshot(), chain, gdn_mode).logits.argmax(-1))[0])
    full = rule(draft, root, max(budgets))
    choice = verify(target, cache, full, gdn_mode).logits.argmax(-1)  # [N+1]
    for b in budgets:
        small = tree_mod.truncate(full, min(b, full.num_nodes))
        out[b] = len(tree_mod.accept(small, choice[:len(small)])[0])
    return out


@torch.no_grad()
def accepted_at_reference(target, drafter, context: torch.Tensor, budgets: Sequence[int], block_size: int,
                          gdn_mode: str = "wy", *, tree: str | None = None) -> dict:
    """``accepted_at``'s plain twin: every budget's tree built and verified on its own."""
    rule = tree_rule(drafter, tree)
    cache, root, draft = _draft_at(target, drafter, context, block_size)
    trees = {"dflash": rule.chain(draft, root, block_size - 1)}
    trees.update({b: rule(draft, root, b) for b in budgets})
    return {k: len(tree_mod.accept(t, verify(target, cache.snapshot(), t, gdn_mode).logits.argmax(-1))[0])
            for k, t in trees.items()}


def teacher_forced(target, drafter, texts: Sequence[Sequence[int]], starts: Sequence[int], *,
                   budgets: Sequence[int] = (1, 4, 16, 64), block_size: int = 8, stride: int = 16,
                   gdn_mode: str = "wy", label: str = "", progress: bool = True,
                   tree: str | None = None) -> pd.DataFrame:
    """Teacher-forced acceptance over ``texts`` (token ids), from ``starts[i]`` on, every ``stride``.

    -> DataFrame rows (label, text, position, method ["dflash" | "ddtree"], budget, acceptance).
    """
    if gdn_mode not in GDN_MODES or not as_gdn_mode(gdn_mode).exact:
        raise ValueError(f"gdn_mode must be an exact mode ('fork' or 'wy'), got {gdn_mode!r}")
    if len(texts) != len(starts):
        raise ValueError(f"starts must have one entry per text ({len(texts)}), got {len(starts)}")
    limit = min(target.config.max_position_embeddings, drafter.cfg.max_positions) - block_size - 1
    jobs = [(i, p) for i, (t, s) in enumerate(zip(texts, starts))
            for p in positions_in(min(len(t), limit), s, stride, 0)]
    rows = []
    for i, p in tqdm(jobs, desc=f"teacher-forced {label}".strip(), disable=not progress):
        acc = accepted_at(target, drafter, torch.as_tensor(texts[i][:p + 1]), budgets, block_size, gdn_mode, tree=tree)
        rows.append({"label": label, "text": i, "position": p, "method": "dflash",
                     "budget": block_size - 1, "acceptance": acc.pop("dflash")})
        rows += [{"label": label, "text": i, "position": p, "method": "ddtree", "budget": b, "acceptance": a}
                 for b, a in acc.items()]
    return pd.DataFrame(rows)


TF_BUDGETS = (1, 2, 4, 8, 16, 32, 64, 128)


def humaneval_texts(tokenizer, problem_ids) -> tuple[list[list[int]], list[int]]:
    """Token ids of prompt + canonical solution per problem, and where the solution starts."""
    problems = humaneval_problems()
    texts = [tokenizer.encode(problems[i]["prompt"] + problems[i]["canonical_solution"]).ids for i in problem_ids]
    starts = [len(tokenizer.encode(problems[i]["prompt"]).ids) for i in problem_ids]
    return texts, starts


def tf_config(arch: str, block_size: int = 8, budgets=TF_BUDGETS, stride: int = 8, tree: str | None = None) -> dict:
    """One teacher-forced configuration (a results-store config); ``tree`` (DFlash 2 studies:
    "unary" | "conditional") only when given."""
    cfg = {"arch": arch, "lens": "teacher_forced_humaneval", "gdn_mode": EXACT_MODE,
           "block_size": block_size, "budgets": list(budgets), "stride": stride}
    return cfg if tree is None else {**cfg, "tree": tree}


def tf_runner(cfg: dict, problem_id: int, pair) -> dict:
    """Results-store runner: the acceptance at every position of one canonical solution."""
    texts, starts = humaneval_texts(pair.tokenizer, [problem_id])
    frame = teacher_forced(pair.target, pair.drafter, texts, starts, budgets=cfg["budgets"],
                           block_size=cfg["block_size"], stride=cfg["stride"],
                           gdn_mode="wy", progress=False, tree=cfg.get("tree"))
    return {"positions": frame[frame.method == "dflash"].position.tolist(),
            "dflash": frame[frame.method == "dflash"].acceptance.tolist(),
            **{f"ddtree_{b}": frame[(frame.method == "ddtree") & (frame.budget == b)].acceptance.tolist()
               for b in cfg["budgets"]}}


def tf_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean acceptance (tau) per arch and method/budget over every stored position.

    frame: a results-store frame of teacher-forced rows -> columns arch, method, budget, tau, positions.
    """
    out = []
    own = "unary"  # a row without a tree ran the DFlash drafter's own (``decode.tree_rule``)
    frame = frame if "tree" in frame else frame.assign(tree=own)
    for (arch, bs, tree), rows in frame.assign(tree=frame["tree"].fillna(own)).groupby(["arch", "block_size", "tree"]):
        metrics = rows["_metrics"].tolist()
        n = sum(len(m["dflash"]) for m in metrics)
        out.append({"arch": arch, "block_size": bs, "tree": tree, "method": "dflash", "budget": bs - 1,
                    "positions": n, "tau": sum(sum(m["dflash"]) for m in metrics) / max(n, 1)})
        for b in rows.iloc[0]["budgets"]:
            out.append({"arch": arch, "block_size": bs, "tree": tree, "method": "ddtree", "budget": b,
                        "positions": n, "tau": sum(sum(m[f"ddtree_{b}"]) for m in metrics) / max(n, 1)})
    return pd.DataFrame(out)


def run_teacher_forced(pairs: dict, store, problem_ids, block_size: int = 8, stride: int = 8,
                       progress: bool = True, *, trees=(None,)) -> pd.DataFrame:
    """Fill ``store`` with the teacher-forced lens for every pair ({arch: Pair}) and tree of
    ``trees`` (None: the drafter's own); -> tf_summary."""
    configs = [tf_config(arch, block_size, TF_BUDGETS, stride, tree) for arch in pairs for tree in trees]
    return tf_summary(run_sweep(configs, list(problem_ids), store, pairs, progress=progress, runner=tf_runner))
