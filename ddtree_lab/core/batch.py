"""Batched speculative decoding: B sequences, one draft tree each, ONE target verify per round.

Issue 13 item 1 (DDTree, arXiv 2604.12989, sections 3-4, over a batch; docs/background.md
section 7). A round for the sequences still running:

1. draft: ``DFlashDrafter.propose_batch``: ONE forward of the published ``DFlashDraftModel``
   over every sequence's new context rows and block, each sequence's context left-padded;
2. tree: ``build_tree`` (or ``chain_tree``) per sequence, each with its own budget, or with
   ``budget="auto"`` the budgets chosen jointly for the round (``allocate.auto_trees``: the
   batch's expected tokens per predicted second of a batched round, maximal; the verify pads
   every tree to the largest, so the trees of a round share one size unless a tree is smaller);
3. verify: ``batch_verify.verify_batch`` packs every tree into one stock forward of batch B;
4. accept per sequence (its own temperature-0 argmax or seeded sample);
5. ragged commit: ``cache.commit`` per sequence keeps its own accepted rows (every sequence
   accepts its own length); sequences that reached their ``max_new_tokens`` leave the batch.

Each sequence keeps its own ``TreeCache`` between rounds (prefilled batch 1), so prefill,
commit, ``commit_reference`` and the cache checks are batch 1's own code. At T = 0 each
sequence's tokens equal its own batch-1 AR output; at T > 0 sequence b samples with its own
generator (seed + b), the same ancestral sampling as batch 1.

``generate_batch(method="ar")`` is the baseline: the stock transformers forward with its
``DynamicCache``, prompts left-padded, a 2-D attention mask and per-sequence positions.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .allocate import auto_trees
from .batch_verify import verify_batch
from .cache import TreeCache, commit
from .drafter import DrafterState
from .decode import Generation, accept_round, check_generate_args, choose_tokens, sampled, start, timed_phase, tree_rule


# ----------------------------------------------------------------------------- decoding

@dataclass(eq=False)
class _Sequence:
    """One running sequence: its cache, drafter state, the features of the rows committed
    since its last round [n, F], its next root token, its budget and its output."""
    cache: TreeCache
    dstate: DrafterState
    features: torch.Tensor
    root: int
    budget: int | str
    max_new_tokens: int
    rng: torch.Generator | None
    gen: Generation = field(default_factory=Generation)


def _per_sequence(name: str, value, count: int) -> list:
    """One value for every sequence, or a list/tuple of ``count`` values (one per prompt)."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{name} must be one value or a list of {count} (one per prompt), got {len(value)} values")
        return list(value)
    return [value] * count


def check_generate_batch_args(target, drafter, prompts, method, budget, block_size, max_new_tokens,
                              temperature, gdn_mode, cost_model=None,
                              accept_rule="rejection", tree=None) -> tuple[list, list, list]:
    """Validate everything before any work: -> (prompts as LongTensor[T_b], budgets, max_new_tokens)."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token id sequences, got {type(prompts).__name__}"
                         + (" of length 0" if isinstance(prompts, (list, tuple)) else ""))
    budgets = _per_sequence("budget", budget, len(prompts))
    news = _per_sequence("max_new_tokens", max_new_tokens, len(prompts))
    if method != "ar" and budget != "auto" and any(isinstance(x, str) for x in budgets):
        raise ValueError(f"budget must be an int, one int per prompt, or 'auto' (for the whole batch), got {budget!r}")
    if method != "ar" and budget == "auto" and not hasattr(cost_model, "batch_round_seconds"):
        raise ValueError("budget='auto' in generate_batch needs a batched cost_model with batch_round_seconds "
                         f"(ddtree_lab.experiments.costs.batch_cost_model), got {type(cost_model).__name__}")
    if method == "ddtree" and budget == "auto" and tree_rule(drafter, tree).name == "conditional":
        raise ValueError("budget='auto' in generate_batch allocates unary trees only: pass tree='unary' "
                         "or one int budget per prompt for conditional trees")
    checked = []
    for b, prompt in enumerate(prompts):
        if isinstance(prompt, (int, float)) or (isinstance(prompt, torch.Tensor) and prompt.dim() == 0):
            raise ValueError(f"prompts[{b}] must be a sequence of token ids (prompts is a list of prompts), "
                             f"got the scalar {prompt!r}")
        try:
            checked.append(check_generate_args(target, drafter, prompt, method, budgets[b], block_size,
                                               news[b], temperature, gdn_mode, cost_model, accept_rule, tree))
        except ValueError as err:
            raise ValueError(f"prompts[{b}]: {err}") from None
    return checked, budgets, news


@torch.no_grad()
def generate_batch(target, drafter, prompts, *, method: str, budget: int | list | str = 32, block_size: int = 8,
                   max_new_tokens: int | list = 128, temperature: float = 0.0, gdn_mode: str = "wy",
                   seed: int = 0, cost_model=None, accept_rule: str = "rejection",
                   tree: str | None = None) -> list[Generation]:
    """``decode.generate`` for a batch of prompts (any lengths): one Generation per prompt.

    budget, max_new_tokens: one int, or a list with one per prompt; budget "auto" (DDTree):
    every round the budgets are chosen jointly with ``cost_model`` (``batch_round_seconds``,
    ``max_budget``: see ``allocate.auto_trees``; unary trees). tree: as ``decode.generate``. Sequence b samples with
    its own generator seeded ``seed + b`` (T > 0). timings: every Generation carries the
    whole batch's seconds per phase (the phases are shared).
    """
    prompts, budgets, news = check_generate_batch_args(target, drafter, prompts, method, budget, block_size,
                                                       max_new_tokens, temperature, gdn_mode, cost_model,
                                                       accept_rule, tree)
    rngs = [torch.Generator().manual_seed(seed + b) if temperature > 0 else None for b in range(len(prompts))]
    clock = Generation()  # holds the batch's timings
    t0 = time.perf_counter()
    if method == "ar":
        gens = _generate_batch_ar(target, prompts, news, temperature, rngs, clock)
    else:
        gens = _generate_batch_spec(target, drafter, prompts, method, budgets, block_size, news,
                                    temperature, gdn_mode, rngs, clock, cost_model, accept_rule,
                                    tree_rule(drafter, tree))
    clock.timings["total"] = time.perf_counter() - t0
    for g, n in zip(gens, news):
        g.tokens, g.timings = g.tokens[:n], dict(clock.timings)
    return gens


def _start(target, drafter, prompt, budget, max_new, rng) -> _Sequence:
    """Prefill one prompt (batch 1, ``decode.start``) and open its drafter state."""
    cache, features, root = start(target, drafter, prompt)
    return _Sequence(cache, drafter.new_state(), features, root, budget, max_new, rng)


def _generate_batch_spec(target, drafter, prompts, method, budgets, block_size, news, temperature,
                         gdn_mode, rngs, clock: Generation, cost_model, accept_rule: str,
                         rule) -> list[Generation]:
    layers = tuple(drafter.cfg.target_layer_ids)
    with timed_phase(clock, "prefill"):
        seqs = [_start(target, drafter, p, *args) for p, *args in zip(prompts, budgets, news, rngs)]
    running = list(seqs)
    while running:
        with timed_phase(clock, "draft"):
            drafts = propose_all(drafter, running, block_size)  # Draft each, logits [bs-1, V]
            proposals = [rule.proposal(d) for d in drafts]
        with timed_phase(clock, "tree"):
            trees = [sampled(t, q, temperature, accept_rule, s.rng)
                     for t, q, s in zip(draft_trees(drafts, running, method, cost_model, rule), proposals, running)]
        with timed_phase(clock, "verify"):
            outs = verify_batch(target, [s.cache for s in running], trees, gdn_mode, layers)
        with timed_phase(clock, "accept"):
            # every sequence walks its own tree with its own generator (``decode.accept_round``):
            # lossless per sequence whatever the other sequences of the batch accept
            walks = [accept_round(t, o.logits, q, temperature, accept_rule, s.rng)[:2]
                     for t, o, q, s in zip(trees, outs, proposals, running)]
        with timed_phase(clock, "commit"):
            for s, t, o, (path, bonus) in zip(running, trees, outs, walks):
                commit(target, s.cache, t, path)
                s.features, s.root = o.features[path], bonus
                s.gen.tokens += t.tokens[path[1:]].tolist() + [bonus]
                s.gen.acceptance_lengths.append(len(path))
                s.gen.tree_sizes.append(t.num_nodes)
        running = [s for s in running if len(s.gen.tokens) < s.max_new_tokens]
    return [s.gen for s in seqs]


def draft_trees(drafts: list, running: list[_Sequence], method: str, cost_model, rule) -> list:
    """One tree per running sequence (``rule``: ``decode.TreeRule``): its own budget, or
    (DDTree, budget "auto", unary trees) budgets chosen jointly for this round's batch by
    ``auto_trees``."""
    if method == "ddtree" and running[0].budget == "auto":
        return auto_trees([d.logits for d in drafts], [s.root for s in running], cost_model)
    return [rule.tree(d, s.root, method, s.budget) for d, s in zip(drafts, running)]


def propose_all(drafter, running: list[_Sequence], block_size: int) -> list:
    """One ``Draft`` per running sequence, in one forward (``draft_batch``)."""
    return drafter.draft_batch([s.dstate for s in running], [s.features for s in running],
                               [s.root for s in running], block_size)


def left_pad(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of any lengths -> ids [B, Pmax] (padding id 0 on the left), mask [B, Pmax] (1 = token)."""
    P = max(p.numel() for p in prompts)
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    mask = torch.zeros(len(prompts), P, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - p.numel():], mask[b, P - p.numel():] = p, 1
    return ids, mask


def _generate_batch_ar(target, prompts, news, temperature, rngs, clock: Generation) -> list[Generation]:
    """Batched AR on the stock forward and ``DynamicCache``: left padding, a 2-D attention mask,
    per-sequence positions. Every row runs until the longest sequence is done (the stock
    Qwen3.5 linear-attention cache layer has no ``batch_select_indices``); extra tokens of
    finished rows are dropped."""
    from transformers import DynamicCache
    device = next(target.parameters()).device
    ids, mask = (t.to(device) for t in left_pad(prompts))
    positions = mask.sum(-1, keepdim=True)  # [B, 1] position of the next token
    cache, gens = DynamicCache(config=target.config), [Generation() for _ in prompts]
    with timed_phase(clock, "prefill"):
        logits = target(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                        past_key_values=cache, use_cache=True).logits[:, -1]  # [B, V]
    for step in range(max(news)):
        tokens = torch.stack([choose_tokens(logits[b:b + 1], temperature, rng)[0] for b, rng in enumerate(rngs)])  # [B]
        for g, token in zip(gens, tokens.tolist()):
            g.tokens.append(token)
            g.acceptance_lengths.append(1)
            g.tree_sizes.append(0)
        if step + 1 == max(news):
            break
        with timed_phase(clock, "verify"):
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)  # [B, P + step + 1]
            logits = target(tokens[:, None].to(device), attention_mask=mask, position_ids=positions + step,
                            past_key_values=cache, use_cache=True).logits[:, -1]
    return gens
