"""The speculative decoding loop: AR, DFlash (linear draft) and DDTree (draft tree).

One round (DFlash, arXiv 2602.06036, section 3; DDTree, arXiv 2604.12989, sections 3-4): the drafter proposes a block from its cached context
-> a tree (``chain_tree`` for DFlash, ``build_tree`` for DDTree) -> ONE target verify ->
accept walk -> commit (target cache and drafter context advance by the accepted path and
the bonus). No full re-forward of the sequence per round. At T = 0 the output equals AR
decoding token for token (exact verification modes). At T > 0 ``accept_rule`` picks the
walk (``sampling``): "rejection" (default, DFlash's rule: draft tokens sampled from the
drafter's q, accepted with min(1, p/q), residual on rejection, recursively over a node's
children for trees) or "target" (deterministic draft, the walk follows the target's own
sample at every node). Both are lossless.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import tree as tree_mod
from .cache import commit
from .conditional import build_conditional_tree, conditional_chain
from .sampling import ACCEPT_RULES, Conditional, Marginal, accept_rejection
from .verify import GDN_MODES, prefill, token_ids, verify

METHODS = ("ar", "dflash", "ddtree")
TREES = ("unary", "conditional")
MAX_BUDGET = 1024
PHASES = ("draft", "tree", "verify", "accept", "commit")


@dataclass
class Generation:
    """tokens: new tokens; acceptance_lengths: accepted draft tokens + 1 per round;
    tree_sizes: draft nodes verified per round; timings: seconds per phase and total;
    entropies: per new token, the entropy (nats) of the target distribution it was chosen
    from, softmax(logits / T) (at T = 0: softmax(logits), the target's own uncertainty)."""
    tokens: list[int] = field(default_factory=list)
    acceptance_lengths: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES + ("prefill", "total"), 0.0))

    @property
    def tau(self) -> float:
        """Mean acceptance length (accepted draft tokens + 1 per target forward)."""
        return sum(self.acceptance_lengths) / max(1, len(self.acceptance_lengths))

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / max(self.timings["total"], 1e-12)


def entropies(logits: torch.Tensor, temperature: float) -> list[float]:
    """Entropy in nats of softmax(logits / T) per row of logits [n, V] (T = 0 reads as 1)."""
    logp = torch.log_softmax(logits.double() / (temperature or 1.0), dim=-1)
    return (-(logp.exp() * logp).sum(-1)).tolist()


def device_sync() -> None:
    """Wait for queued GPU work, so a host timer measures it (a no-op on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextmanager
def timed_phase(gen: Generation, phase: str):
    """Add the seconds of the block to ``gen.timings[phase]`` (device-synced at both ends)."""
    device_sync()
    t0 = time.perf_counter()
    yield
    device_sync()
    gen.timings[phase] += time.perf_counter() - t0


def choose_tokens(logits: torch.Tensor, temperature: float, rng: torch.Generator | None) -> torch.Tensor:
    """The target's token at every row of logits [n, V]: argmax (T=0) or a sample."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.double().cpu() / temperature, dim=-1)  # the seeded generator is on the host
    return torch.multinomial(probs, 1, generator=rng).squeeze(-1)


@dataclass(frozen=True)
class TreeRule:
    """How a round turns a ``drafter.Draft`` into its tree and its T > 0 proposal, chosen once
    per generation (``tree_rule``): "unary" (DDTree over the per-depth marginals; DFlash's
    argmax chain) or "conditional" (DFlash 2: children by the selector's q(c | parent token);
    the selector's path walk as the chain)."""
    name: str

    def tree(self, draft, root: int, method: str, budget: int) -> tree_mod.DraftTree:
        if self.name == "conditional":
            return (conditional_chain(draft.conditional, root) if method == "dflash"
                    else build_conditional_tree(draft.conditional, root, budget))
        return draft_tree(draft.logits, root, method, budget)

    def proposal(self, draft):
        """The drafter's q for the rejection rule (``sampling.Marginal`` / ``Conditional``)."""
        return Conditional(draft.conditional) if self.name == "conditional" else Marginal(draft.logits)


def tree_rule(drafter, tree: str | None) -> TreeRule:
    """The ``TreeRule`` named ``tree``; None: "conditional" for a DFlash 2 drafter (it has a
    candidate selector), else "unary"."""
    if tree is None:
        tree = "conditional" if getattr(drafter, "selector", None) is not None else "unary"
    if tree not in TREES:
        raise ValueError(f"tree must be one of {TREES} or None (the drafter's own), got {tree!r}")
    if tree == "conditional" and getattr(drafter, "selector", None) is None:
        raise ValueError("tree='conditional' needs a DFlash 2 drafter (a candidate selector); "
                         "this drafter has none: use tree='unary'")
    return TreeRule(tree)


def check_generate_args(target, drafter, prompt_ids, method, budget, block_size, max_new_tokens,
                        temperature, gdn_mode, cost_model=None, accept_rule="rejection",
                        tree=None) -> torch.Tensor:
    """Validate everything before any work; returns the prompt as LongTensor[T]."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "ar" and drafter is not None:
        tree_rule(drafter, tree)
    if accept_rule not in ACCEPT_RULES:
        raise ValueError(f"accept_rule must be one of {ACCEPT_RULES}, got {accept_rule!r}")
    if gdn_mode not in GDN_MODES:
        raise ValueError(f"gdn_mode must be one of {GDN_MODES}, got {gdn_mode!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    prompt = token_ids(prompt_ids, target.config.vocab_size, "prompt_ids")
    if prompt.numel() == 0:
        raise ValueError("prompt_ids must hold at least 1 token, got an empty prompt")
    if method != "ar":
        _check_spec_args(target, drafter, budget, block_size, cost_model)
    _check_length(target, drafter, prompt.numel(), max_new_tokens, 0 if method == "ar" else block_size)
    return prompt


def _check_spec_args(target, drafter, budget, block_size, cost_model) -> None:
    """The drafter, budget and block size of a speculative method."""
    if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int)
                             or not 1 <= budget <= MAX_BUDGET):
        raise ValueError(f"budget must be an int in [1, {MAX_BUDGET}] or 'auto', got {budget!r}")
    if budget == "auto" and cost_model is None:
        raise ValueError("budget='auto' needs cost_model (ddtree_lab.experiments.costs.cost_model)")
    if drafter is None:
        raise ValueError("a speculative method needs a drafter, got None")
    if drafter.cfg.vocab_size != target.config.vocab_size:
        raise ValueError(f"drafter vocab ({drafter.cfg.vocab_size}) must equal the target's "
                         f"({target.config.vocab_size})")
    if isinstance(block_size, bool) or not isinstance(block_size, int) \
            or not 2 <= block_size <= drafter.cfg.block_size:
        raise ValueError(f"block_size must be an int in [2, {drafter.cfg.block_size}] "
                         f"(the drafter was trained at {drafter.cfg.block_size}), got {block_size!r}")


def _check_length(target, drafter, prompt_len: int, max_new_tokens, block_size: int) -> None:
    """prompt + max_new_tokens (+ one draft block) must fit the models' positions."""
    limit = target.config.max_position_embeddings
    if drafter is not None and block_size:
        limit = min(limit, drafter.cfg.max_positions)
    most = limit - prompt_len - block_size
    if most < 1:
        raise ValueError(f"prompt_ids ({prompt_len} tokens) leave no room for new tokens in the model's "
                         f"{limit} positions" + (f" (with a block of {block_size})" if block_size else ""))
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= most:
        raise ValueError(f"max_new_tokens must be an int in [1, {most}] (the model's {limit} positions minus "
                         f"the prompt's {prompt_len}" + (f" and one block of {block_size}" if block_size else "")
                         + f"), got {max_new_tokens!r}")


@torch.no_grad()
def generate(target, drafter, prompt_ids, *, method: str, budget: int | str = 32,
             block_size: int = 8, max_new_tokens: int = 128, temperature: float = 0.0,
             gdn_mode: str = "wy", seed: int = 0, cost_model=None, on_round=None,
             accept_rule: str = "rejection", tree: str | None = None) -> Generation:
    """Generate ``max_new_tokens`` tokens after ``prompt_ids`` with one of METHODS.

    budget: draft nodes per DDTree round, or "auto" (per round, maximise expected tokens
    per predicted second with ``cost_model``, see ``auto_tree``).
    on_round: optional callback ``on_round(Round)`` after every speculative round (for
    calibration and leakage studies; not timed apart from the loop).
    accept_rule: ``sampling.ACCEPT_RULES``, the T > 0 walk ("rejection": DFlash's rule with
    the drafter's q; "target": target-only matching); ignored at T = 0.
    tree: ``TREES`` ("unary" / "conditional"); None: the drafter's own (a DFlash 2 drafter
    builds conditional trees, ``TreeRule``).
    """
    prompt = check_generate_args(target, drafter, prompt_ids, method, budget, block_size,
                                 max_new_tokens, temperature, gdn_mode, cost_model, accept_rule, tree)
    rng = torch.Generator().manual_seed(seed) if temperature > 0 else None
    gen = Generation()
    t0 = time.perf_counter()
    if method == "ar":
        _generate_ar(target, prompt, max_new_tokens, temperature, rng, gen)
    else:
        _generate_spec(target, drafter, prompt, method, budget, block_size, max_new_tokens,
                       temperature, gdn_mode, rng, gen, cost_model, on_round, accept_rule,
                       tree_rule(drafter, tree))
    gen.timings["total"] = time.perf_counter() - t0
    gen.tokens = gen.tokens[:max_new_tokens]
    gen.entropies = gen.entropies[:max_new_tokens]
    return gen


def _generate_ar(target, prompt, max_new_tokens, temperature, rng, gen: Generation) -> None:
    """Plain decoding with transformers' own cache: one target forward per token."""
    from transformers import DynamicCache
    cache = DynamicCache(config=target.config)
    device = next(target.parameters()).device
    with timed_phase(gen, "prefill"):
        logits = target(prompt[None].to(device), past_key_values=cache, use_cache=True).logits[0, -1]
    while len(gen.tokens) < max_new_tokens:
        token = int(choose_tokens(logits[None], temperature, rng)[0])
        gen.tokens.append(token)
        gen.entropies += entropies(logits[None], temperature)
        gen.acceptance_lengths.append(1)
        gen.tree_sizes.append(0)
        if len(gen.tokens) == max_new_tokens:
            break
        with timed_phase(gen, "verify"):
            logits = target(torch.tensor([[token]], device=device), past_key_values=cache,
                            use_cache=True).logits[0, -1]


def draft_tree(drafter_logits: torch.Tensor, root: int, method: str, budget) -> tree_mod.DraftTree:
    if method == "dflash":
        return tree_mod.chain_tree(drafter_logits.argmax(-1), root)
    return tree_mod.build_tree(drafter_logits, root, budget)


def sampled(tree: tree_mod.DraftTree, proposal, temperature: float, accept_rule: str, rng):
    """The tree the round verifies: under the rejection rule at T > 0 its tokens are drawn
    from the drafter's q (``proposal.sample_tree``), else the deterministic tree itself."""
    if temperature > 0 and accept_rule == "rejection":
        return proposal.sample_tree(tree, temperature, rng)
    return tree


def accept_round(tree, target_logits, proposal, temperature: float, accept_rule: str, rng):
    """(path, bonus, choice): the round's accept walk. choice [N+1] is the target's own token
    at every node (argmax, or a sample under the target-only rule); None under rejection."""
    if temperature > 0 and accept_rule == "rejection":
        return (*accept_rejection(tree, target_logits, proposal, temperature, rng), None)
    choice = choose_tokens(target_logits, temperature, rng)
    return (*tree_mod.accept(tree, choice), choice)


@dataclass(frozen=True, eq=False)
class Round:
    """What one speculative round saw: draft logits [bs-1, V], the tree, the target's
    logits [N+1, V] and choices [N+1], the accepted path, the bonus token and the drafter's
    q (``proposal``: ``sampling.Marginal`` or ``Conditional``)."""
    draft_logits: torch.Tensor
    tree: tree_mod.DraftTree
    target_logits: torch.Tensor
    target_choice: torch.Tensor | None  # None under the rejection rule at T > 0
    path: list
    bonus: int
    proposal: object = None


def _generate_spec(target, drafter, prompt, method, budget, block_size, max_new_tokens,
                   temperature, gdn_mode, rng, gen: Generation, cost_model, on_round,
                   accept_rule: str, rule: TreeRule) -> None:
    layers = tuple(drafter.cfg.target_layer_ids)
    with timed_phase(gen, "prefill"):
        cache, new_features, root = start(target, drafter, prompt)
        dstate = drafter.new_state()
    while len(gen.tokens) < max_new_tokens:
        with timed_phase(gen, "draft"):
            draft = drafter.draft(dstate, new_features, root, block_size)  # logits [bs-1, V]
            proposal = rule.proposal(draft)
        with timed_phase(gen, "tree"):
            tree = (auto_tree(draft, root, cost_model, rule) if budget == "auto"
                    else rule.tree(draft, root, method, budget))
            tree = sampled(tree, proposal, temperature, accept_rule, rng)
        with timed_phase(gen, "verify"):
            out = verify(target, cache, tree, gdn_mode, feature_layers=layers)
        with timed_phase(gen, "accept"):
            path, bonus, choice = accept_round(tree, out.logits, proposal, temperature, accept_rule, rng)
        with timed_phase(gen, "commit"):
            commit(target, cache, tree, path)
            new_features = out.features[path]
        gen.tokens += tree.tokens[path[1:]].tolist() + [bonus]
        gen.entropies += entropies(out.logits[path], temperature)  # the rows the new tokens came from
        gen.acceptance_lengths.append(len(path))
        gen.tree_sizes.append(tree.num_nodes)
        root = bonus
        if on_round is not None:
            on_round(Round(draft.logits, tree, out.logits, choice, path, bonus, proposal))


def start(target, drafter, prompt: torch.Tensor) -> tuple:
    """Open a speculative generation of ``prompt`` [T]: prefill prompt[:-1] -> (target cache,
    features [T-1, F] of those rows for the drafter, root = prompt[-1], the first round's
    last committed token)."""
    cache, pre = prefill(target, prompt[:-1], feature_layers=tuple(drafter.cfg.target_layer_ids))
    features = pre.features if pre is not None else torch.zeros(0, drafter.cfg.feature_size)
    return cache, features, int(prompt[-1])


def auto_tree(draft, root: int, cost_model, rule: TreeRule = TreeRule("unary")) -> tree_mod.DraftTree:
    """The tree whose budget maximises (expected accepted + 1) / predicted round seconds.

    Builds once at the largest budget the cost model covers; the surrogate's expected
    acceptance of every heap prefix (each the best tree of its size) against the measured
    cost curve picks the budget, and the tree is that prefix.
    """
    full = rule.tree(draft, root, "ddtree", cost_model.max_budget)
    gain = 1.0 + tree_mod.expected_acceptance_prefixes(full)  # [N]
    budgets = torch.arange(1, gain.numel() + 1)
    rate = gain / cost_model.round_seconds(budgets)
    return tree_mod.truncate(full, int(budgets[int(rate.argmax())]))
