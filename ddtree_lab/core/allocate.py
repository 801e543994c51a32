"""Load-aware budgets: share one batched round's draft nodes among the batch's trees
(issue 13 item 3; DDTree, arXiv 2604.12989, Prop. 1; CaDDTree, arXiv 2606.01813, for one tree).

Under the factorised surrogate a tree's expected accepted draft tokens is the sum of q(u)
over its nodes; a built tree's pop order makes q non-increasing along it, so q(u) is the
node's marginal gain and every prefix is the best tree of its size. Every sequence gains its
bonus token, so a round of B trees with budgets n_b yields B + sum_b G_b(n_b) tokens in
expectation (G_b: the sum of sequence b's first n_b gains). A batched round costs
``seconds[v - 1]`` at v verify tokens, from a cost model measured over batch x tokens
(B trees of equal size: v = B x budget). What v is depends on the verify:

- ``padded=True`` (a verify that pads every tree to the largest):
  v = B x max_b n_b. For a largest budget m every sequence then gets min(m, N_b) nodes (the
  padding is paid anyway), so the best allocation is the best m:
  rate(m) = (B + sum_b G_b(min(m, N_b))) / seconds[B m - 1];
- ``padded=False`` (a packed verify, trees side by side without padding, as
  ``verify.verify_batch`` runs trees of different sizes): v = sum_b n_b.
  For a fixed v the best split is the v largest marginals (each sequence's first node
  forced: a tree holds at least one node), prefix-closed per sequence, and the best v
  maximises (B + sum of the v largest marginals) / seconds[v - 1]; trees differ in size.

``allocate_budgets`` does either in one pass (O(N log N)); its twin
``naive.allocate_budgets`` scores every budget vector (tiny cases only), the test oracle.
``auto_trees`` applies it to a batch's trees.

The chain as a candidate (issue 69 item 6): a batch of one whose cost model prices the DFlash
chain's round apart (``chain_seconds``: no tree built, a linear verify) also weighs the
drafter's linear draft of L = block_size - 1 nodes, whose expected tokens under the same
surrogate are E_c = 1 + sum_d prod_{i<=d} p1(i) (p1: the top probability at depth i). The round
verifies whichever of {the chain, every prefix of the tree} has the most expected tokens per
predicted second (ties: the chain). No tree is built when none can win: every node off the
chain weighs at most m = max_d prod_{i<d} p1(i) p2(d) (p2: the second probability), so a tree of
n nodes expects at most E_c + n m tokens; sizes whose bound stays at or under the chain's rate
are never built (``chain_plan``), and the tree is built at the largest size left. The choice
reads the draft only, so decoding stays token-exact at T = 0 and lossless at T > 0.

A calibrated choice: the drafter's q is not what the target accepts (notebook 06: a node on the
drafter's top-1 path is accepted far more often than q, a node off it less often), so under q
``auto`` over-values trees against the chain. A cost model that carries an ``acceptance``
(``Calibration``: P(accepted) = sigmoid(b + a log q) per group, top-1 path or off it) has the
chain and every prefix weighed by it instead; the bounds hold with it (each group's P rises
with q), and the choice still reads the draft only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import tree as tree_mod
from .rules import BestFirst


def _verify_tokens(budgets, padded: bool) -> int:
    """Tokens a batched verify processes for these budgets (padded: B x the largest)."""
    return len(budgets) * max(budgets) if padded else sum(budgets)


def _check_allocation_args(gains: list[torch.Tensor], seconds: torch.Tensor, padded: bool) -> None:
    """gains: B >= 1 non-empty 1-D tensors; seconds: 1-D, a positive entry per verify-token count."""
    if not isinstance(gains, (list, tuple)) or not gains \
            or any(not isinstance(g, torch.Tensor) or g.dim() != 1 or g.numel() < 1 for g in gains):
        raise ValueError("gains must be a non-empty list of non-empty 1-D tensors (one per sequence)")
    need = _verify_tokens([g.numel() for g in gains], padded)
    if not isinstance(seconds, torch.Tensor) or seconds.dim() != 1 or seconds.numel() < need \
            or not bool((seconds > 0).all()):
        raise ValueError(f"seconds must be a 1-D tensor of at least {need} positive entries (one per verify-token "
                         f"count), got {getattr(seconds, 'shape', type(seconds))}")


def allocate_budgets(gains: list[torch.Tensor], seconds: torch.Tensor, padded: bool = True) -> list[int]:
    """Per-sequence budgets maximising expected tokens per predicted second.

    gains: B tensors [N_b], sequence b's node marginals q(u) in pop order (non-increasing);
    seconds: [>= v_max], entry v-1 the predicted round seconds at v verify tokens (v_max:
    B x max N_b if padded, else sum N_b). Returns B budgets, 1 <= budget_b <= N_b; among equal
    rates the fewest verify tokens win; ties between nodes: lower sequence, then earlier node.
    """
    _check_allocation_args(gains, seconds, padded)
    return _allocate_padded(gains, seconds) if padded else _allocate_packed(gains, seconds)


def _allocate_padded(gains: list[torch.Tensor], seconds: torch.Tensor) -> list[int]:
    B, sizes = len(gains), [g.numel() for g in gains]
    top = max(sizes)
    cum = torch.stack([torch.cat([g.double().cumsum(0), g.double().sum().expand(top - g.numel())]) for g in gains])
    tokens = B + cum.sum(0)  # [top]: expected tokens when the largest budget is m = 1 .. top
    rate = tokens / seconds[B * torch.arange(1, top + 1) - 1].double()  # [top]
    m = int(rate.argmax()) + 1
    return [min(m, n) for n in sizes]


def _allocate_packed(gains: list[torch.Tensor], seconds: torch.Tensor) -> list[int]:
    B = len(gains)
    rest = sorted((-q, b, i) for b, g in enumerate(gains) for i, q in enumerate(g[1:].tolist(), start=1))
    firsts = math.fsum(float(g[0]) for g in gains)
    extra = torch.tensor([0.0] + [-neg for neg, _, _ in rest], dtype=torch.float64).cumsum(0)  # [1 + R]
    rate = (B + firsts + extra) / seconds[B - 1:B + len(rest)].double()  # [1 + R]: totals B .. sum N_b
    budgets = [1] * B
    for _, b, _ in rest[:int(rate.argmax())]:
        budgets[b] += 1
    return budgets


def auto_trees(full: list[tree_mod.DraftTree], cost_model, padded: bool = True) -> list[tree_mod.DraftTree]:
    """Each sequence's tree ``full[b]`` (built once at ``cost_model.max_budget``, the
    per-sequence maximum, by any best-first rule: its pop order makes the node marginals
    non-increasing) cut to the budget ``allocate_budgets`` gives it.

    ``cost_model.batch_round_seconds(tokens [n], batch) -> seconds [n]`` predicts a round of
    ``batch`` trees whose verify processes ``tokens`` tokens. padded: the verify pads every
    tree to the largest (False: it packs them, as ``verify.verify_batch`` does). Batch 1: the tree whose budget
    maximises (expected accepted + 1) / predicted round seconds.

    A cost model with ``tree_round_seconds(tree) -> seconds [N]`` (entry n-1: a round verifying
    the tree's first n nodes) prices each tree by its own nodes, not by their count: the
    expert-aware budget of issue 61 (``experiments.plumbing.expert_costs``), batch 1 only. It
    only chooses the prefix, as every ``auto`` does, so decoding stays lossless.
    """
    gains = [t.log_weights[1:].exp() for t in full]  # [N_b] each, non-increasing
    if hasattr(cost_model, "tree_round_seconds"):
        if len(full) != 1:
            raise ValueError(f"a cost model that prices a tree by its nodes (tree_round_seconds) chooses one tree "
                             f"at a time, got a batch of {len(full)}")
        seconds = cost_model.tree_round_seconds(full[0]).double()  # [N]
        return [tree_mod.truncate(full[0], allocate_budgets(gains, seconds)[0])]
    most = _verify_tokens([t.num_nodes for t in full], padded)
    seconds = cost_model.batch_round_seconds(torch.arange(1, most + 1), len(full))  # [most]
    return [tree_mod.truncate(t, b) for t, b in zip(full, allocate_budgets(gains, seconds, padded))]


# ----------------------------------------------------------------------------- the chain as a candidate

@dataclass(frozen=True)
class ChainPlan:
    """One round's plan when the chain is a candidate: ``chain`` True verifies the linear draft
    (no tree is built); else build the tree at ``max_budget`` nodes and let ``pick`` choose
    between its prefixes and the chain. tokens: the chain's expected tokens E_c; seconds: its
    predicted round; tree_seconds [max_budget]: a tree round's predicted seconds by size."""
    chain: bool
    max_budget: int
    tokens: float
    seconds: float
    tree_seconds: torch.Tensor

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class Calibration:
    """P(the target accepts a node) = sigmoid(b + a log q(u)), (b, a) per group: ``top1`` (nodes on
    the drafter's top-1 path: the chain's) and ``off``, each with a > 0 (Platt scaling, fitted by
    ``experiments.studies.auto_calibration`` on prompts the benches never decode)."""
    top1: tuple
    off: tuple

    def __post_init__(self):
        for name in ("top1", "off"):
            b, a = getattr(self, name)
            if not (math.isfinite(b) and math.isfinite(a) and a > 0):
                raise ValueError(f"{name} must be (b, a) with finite b and a > 0, got {getattr(self, name)!r}")

    def __call__(self, log_q: torch.Tensor, top1: torch.Tensor) -> torch.Tensor:
        """[n] calibrated P of nodes with path log-probabilities ``log_q`` [n] and group ``top1`` [n] bool."""
        b = torch.where(top1, self.top1[0], self.off[0]).double()
        a = torch.where(top1, self.top1[1], self.off[1]).double()
        return torch.sigmoid(b + a * log_q.double())


def on_top1_path(tree: tree_mod.DraftTree, draft_logits: torch.Tensor) -> torch.Tensor:
    """[N] bool: node u is on the drafter's top-1 path (every token from the root down to it is its
    depth's argmax)."""
    best = draft_logits.argmax(-1).tolist()
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
    top = [True]
    for u in range(1, len(tokens)):
        top.append(top[parents[u]] and tokens[u] == best[depths[u] - 1])
    return torch.tensor(top[1:], dtype=torch.bool)


def node_gains(tree: tree_mod.DraftTree, top1: torch.Tensor, acceptance) -> torch.Tensor:
    """[N] each node's expected acceptance: q(u) (the surrogate; ``acceptance`` None), else the
    calibrated P (``Calibration``) of its group (``top1`` [N] bool: ``on_top1_path``)."""
    log_q = tree.log_weights[1:].double()
    return log_q.exp() if acceptance is None else acceptance(log_q, top1)


def chain_plan(draft_logits: torch.Tensor, cost_model) -> ChainPlan:
    """The plan of a round of one sequence (``draft_logits`` [L, V], row d-1 scores depth d)
    under ``cost_model`` (``batch_round_seconds`` and ``chain_seconds``, ``max_budget``; its
    ``acceptance`` when it carries one): the chain's expected tokens and rate, and the largest
    tree size whose bound E_c + n m (module docstring) beats the chain's rate (none: ``chain`` True)."""
    cal = getattr(cost_model, "acceptance", None)
    top = (draft_logits.topk(min(2, draft_logits.shape[-1]), -1).values.double()
           - torch.logsumexp(draft_logits.double(), -1, keepdim=True))  # [L, <=2] log-probs, no [L, V] copy kept
    along = torch.cat([top.new_zeros(1), top[:, 0].cumsum(0)])  # [L + 1]: log prod_{i<=d} p1(i)
    chain_p = along[1:].exp() if cal is None else cal(along[1:], torch.ones(len(along) - 1, dtype=torch.bool))
    tokens = 1.0 + math.fsum(chain_p.tolist())
    off = 0.0
    if top.shape[1] > 1:  # m: the heaviest node off the chain (calibrated: by the off group, as it is off the path)
        log_m = (along[:-1] + top[:, 1]).max().item()
        off = math.exp(log_m) if cal is None else float(cal(torch.tensor([log_m]), torch.tensor([False])))
    seconds = cost_model.batch_round_seconds(torch.arange(1, cost_model.max_budget + 1), 1).double()  # [max_budget]
    chain_s = float(cost_model.chain_seconds)
    bound = (tokens + off * torch.arange(1, len(seconds) + 1, dtype=torch.float64)) / seconds
    wins = torch.nonzero(bound > tokens / chain_s).flatten()
    most = int(wins[-1]) + 1 if len(wins) else 0
    return ChainPlan(most == 0, most, tokens, chain_s, seconds[:max(most, 1)])


def pick(tree: tree_mod.DraftTree, plan: ChainPlan, gains: torch.Tensor | None = None) -> tree_mod.DraftTree | None:
    """The best prefix of ``tree`` (built at ``plan.max_budget``) by expected tokens per predicted
    second, or None when the chain's rate is at least as high (the round verifies the chain).
    gains [N]: its nodes' expected acceptances (``node_gains``; default q, non-increasing)."""
    gains = tree.log_weights[1:].exp() if gains is None else gains
    n = allocate_budgets([gains], plan.tree_seconds[:tree.num_nodes])[0]
    rate = (1.0 + math.fsum(gains[:n].tolist())) / float(plan.tree_seconds[n - 1])
    return None if plan.rate >= rate else tree_mod.truncate(tree, n)


def chain_candidate(cost_model, rule, batch: int) -> bool:
    """Whether ``auto`` weighs the chain: a batch of one, a cost model with ``chain_seconds``, and
    the best-first rule over the drafter's marginals (its prefixes are its smaller trees; its
    chain is DFlash's linear draft, whose expected tokens ``chain_plan`` prices)."""
    return batch == 1 and getattr(cost_model, "chain_seconds", None) is not None and isinstance(rule, BestFirst)


def auto_with_chain(draft, root_token: int, rule, cost_model, first: int = 32) -> tree_mod.DraftTree:
    """``auto``'s tree of one round with the chain as a candidate (``chain_candidate`` holds):
    the chain when no tree size can beat it (nothing built), else the best prefix of the tree
    that can (``pick``), or the chain when that prefix's rate is not higher. Weighed by q, or by
    the cost model's ``acceptance`` when it carries one.

    The tree is built small first (``first`` nodes) and grown (x4) only while a larger prefix
    could still win (``_may_grow``: its bound, every later node weighing at most what the last
    one's q allows, beats the best prefix so far): the same pick as building it at
    ``plan.max_budget`` at once (a best-first tree's prefixes are its smaller trees), without the
    nodes no prefix would keep."""
    plan = chain_plan(draft.logits, cost_model)
    if plan.chain:
        return rule.chain(draft, root_token, draft.logits.shape[0])
    cal = getattr(cost_model, "acceptance", None)
    size = min(first, plan.max_budget)
    while True:
        tree = rule(draft, root_token, size)
        top1 = None if cal is None else on_top1_path(tree, draft.logits)
        gains = node_gains(tree, top1, cal)
        spare = 0 if cal is None else draft.logits.shape[0] - int(top1.sum())  # top-1 path nodes not in it yet
        if tree.num_nodes < size or size >= plan.max_budget or not _may_grow(tree, gains, plan, cal, spare):
            break
        size = min(4 * size, plan.max_budget)
    best = pick(tree, plan, gains)
    return best if best is not None else rule.chain(draft, root_token, draft.logits.shape[0])


def _may_grow(tree: tree_mod.DraftTree, gains: torch.Tensor, plan: ChainPlan, acceptance=None,
              spare: int = 0) -> bool:
    """Whether a prefix longer than ``tree`` (n nodes, expected acceptances ``gains`` [n]) could
    beat the best of its prefixes and the chain: every later node's q is at most the last node's
    (pop order), so under q it weighs at most that q; calibrated, at most P_top1 of it for the
    ``spare`` top-1 path nodes still out of the tree and P_off of it for every other. A prefix
    of k > n nodes has rate at most (1 + sum gains + the k - n largest of those) / seconds(k)."""
    gains = gains.double()
    n = gains.numel()
    seconds = plan.tree_seconds.double()
    later = len(seconds) - n
    if later <= 0:
        return False
    last = float(tree.log_weights[-1])
    if acceptance is None:
        ceilings = torch.full((later,), math.exp(last), dtype=torch.float64)
    else:
        groups = acceptance(torch.tensor([last, last]), torch.tensor([True, False]))  # [P_top1, P_off]
        top = min(spare, later)
        ceilings = torch.cat([groups[0].expand(top), groups[1].expand(later - top)])
        ceilings = ceilings.sort(descending=True).values
    cum = 1.0 + gains.cumsum(0)
    best = max(float((cum / seconds[:n]).max()), plan.rate)
    bound = (cum[-1] + ceilings.cumsum(0)) / seconds[n:]
    return bool((bound > best).any())
