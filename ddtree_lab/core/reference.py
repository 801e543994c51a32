"""The algorithm on one page, standing alone: ONE sequence, every step of a round inline, the
stock model and transformers' own caches only. It imports none of the lab's fast path (no
verify, cache, decode, batched, adapter, compiled, harness or recurrent-family code), so
"``decode.generate`` equals it" tests the lab's main contribution, the exact tree verify of a
hybrid, against a page that shares none of its code (DFlash, arXiv 2602.06036, section 3;
DDTree, arXiv 2604.12989, sections 3-4; docs/background.md sections 2-4, 9-10 and 13).

    prefill prompt[:-1]; root = prompt[-1]
    per round: (1) draft   ONE drafter pass over [root, MASK x (bs-1)] -> logits [bs-1, V]
               (2) tree    the spec's tree rule (``rules``): the DFlash chain / best-first DDTree,
                           or a rule of one's own (its tree checked)
               (3) verify  exact: the FORK. Node i is the stock model's own one-token step from
                           a copy of its parent's cache: every layer sees exactly node i's path,
                           attention through the cache's rows, each recurrent layer (any family:
                           Gated DeltaNet, KDA, Mamba, short conv, ...) through its state.
                           naive: ONE stock forward over the flattened tree with the tree
                           attention mask; the recurrent layers read it as a chain (the leak)
               (4) accept  the argmax walk (T = 0) or the spec's seeded T > 0 walk
               (5) commit  exact: the accepted node's own cache; naive: the accepted tokens
                           replayed as a chain from the snapshot (the cache before the verify)
    AR (``ar_loop``) drafts nothing: one stock forward per token.

The committed cache is never written: every forward runs on a copy (``copy.deepcopy``), so the
cache before a verify is its own snapshot of the recurrent states, which transformers' caches
cannot roll back (``DynamicCache.crop`` keeps the recurrent state: docs/background.md section 9).
At T > 0 the walks draw from one generator seeded ``seed`` in the fast loop's order. Left to
the fast loop: batches, buffers kept across rounds, ``compile``, ``on_round``, the one-pass
tree forms and their speed. Budget "auto" cuts each tree as the fast loop does
(``allocate.auto_trees``, with the caller's ``cost_model``; the chain one of its candidates
when the cost model prices it, ``allocate.auto_with_chain``).
"""
from __future__ import annotations

import copy
import time

import torch
from transformers import DynamicCache

from .allocate import auto_trees, auto_with_chain, chain_candidate
from .conditional import from_selector
from .drafter import Draft
from .rules import check_tree, choose_tokens
from .spec import Generation, GenerationSpec, check_generate_args, entropies, round_rule, tree_rule
from .tree import DraftTree, accept, ancestor_mask, position_ids


@torch.inference_mode()
def reference_generate(target, drafter, prompt_ids, spec: GenerationSpec | None = None, *,
                       cost_model=None, **spec_args) -> Generation:
    """``decode.generate``'s plain twin: the same spec (a ``GenerationSpec``, or its fields as
    keyword arguments), the same checks, the same ``Generation`` (tokens, entropies,
    acceptance lengths, tree sizes; timings: "total" only). cost_model: for budget "auto"."""
    spec = GenerationSpec.build(spec, **spec_args)
    if isinstance(spec.budget, tuple) or isinstance(spec.max_new_tokens, tuple):
        raise ValueError("reference_generate takes one budget and one max_new_tokens (one prompt)")
    prompt = check_generate_args(target, drafter, prompt_ids, spec, spec.budget, spec.max_new_tokens,
                                 cost_model=cost_model)
    s = spec.sampling
    rng = None if s.greedy else torch.Generator().manual_seed(s.seed)  # on the host, as the fast loop's
    gen, t0 = Generation(), time.perf_counter()
    if spec.method == "ar":
        ar_loop(target, prompt, spec, rng, gen)
    else:
        speculative_loop(target, drafter, prompt, spec, rng, gen, cost_model)
    gen.tokens, gen.entropies = gen.tokens[:spec.max_new_tokens], gen.entropies[:spec.max_new_tokens]
    gen.timings["total"] = time.perf_counter() - t0
    return gen


def stock(target, ids: torch.Tensor, cache, start: int, positions: torch.Tensor | None = None, **kwargs):
    """The stock forward of ids [T] at positions start .. start+T-1 (or ``positions`` [T]) on
    ``cache`` (None: the model makes its own, of the class its family needs) -> its output, with
    ``past_key_values`` and every hidden state. The positions are passed, never left to the model:
    MiniMax's forward counts them from its first layer's cache, a lightning layer that holds no
    rows, and restarts them at 0 in every decode step (docs/background.md section 13)."""
    dev = next(target.parameters()).device
    positions = torch.arange(start, start + ids.numel()) if positions is None else positions
    return target(ids[None].to(dev), position_ids=positions[None].to(dev), past_key_values=cache, use_cache=True,
                  output_hidden_states=True, **kwargs)


def ar_loop(target, prompt: torch.Tensor, spec: GenerationSpec, rng, gen: Generation) -> None:
    """AR: one stock forward per token on the model's own cache."""
    T = spec.sampling.temperature
    out = stock(target, prompt, None, 0)
    while True:
        logits = out.logits[:, -1]  # [1, V]
        token = choose_tokens(logits, T, rng)  # [1]: argmax, or a sample of softmax(logits / T)
        gen.tokens.append(int(token))
        gen.entropies += entropies(logits, T)
        gen.acceptance_lengths.append(1)
        gen.tree_sizes.append(0)
        if len(gen.tokens) == spec.max_new_tokens:
            return
        out = stock(target, token.cpu(), out.past_key_values, prompt.numel() + len(gen.tokens) - 1)


def features(out, layers: tuple) -> torch.Tensor:
    """The drafter's context rows of a stock output: hidden states of ``layers`` side by side,
    [T, len(layers) * D] (hidden_states[0] is the embeddings: layer i's output is [i + 1])."""
    return torch.cat([out.hidden_states[i + 1][0] for i in layers], -1)


def verify_fork(target, snapshot, length: int, tree: DraftTree, layers: tuple) -> tuple:
    """Exact: node i is ONE stock step of its token at position length + depth(i) from a copy of its
    parent's cache (the root's: the snapshot of ``length`` committed rows) -> (logits [N+1, V],
    features [N+1, F], each node's cache)."""
    caches, logits, rows = [], [], []
    for i, (p, d) in enumerate(zip(tree.parents.tolist(), tree.depths.tolist())):
        out = stock(target, tree.tokens[i:i + 1], copy.deepcopy(snapshot if p < 0 else caches[p]), length + d)
        caches.append(out.past_key_values)  # node i's path: the committed rows, then root .. i
        logits.append(out.logits[0, -1])
        rows.append(features(out, layers)[-1])
    return torch.stack(logits), torch.stack(rows), caches


def verify_naive(target, snapshot, length: int, tree: DraftTree, layers: tuple) -> tuple:
    """Naive: ONE stock forward over the flattened tree on a copy of the snapshot; node i at
    position length + depth(i) sees the committed rows and its ancestors in every attention layer
    (an additive mask), while each recurrent layer runs over the tree in order, as a chain: its
    state and conv window leak across branches -> (logits [N+1, V], features [N+1, F])."""
    p = next(target.parameters())
    allowed = torch.cat([torch.ones(len(tree), length, dtype=torch.bool), ancestor_mask(tree)], 1)  # [n, L + n]
    bias = torch.zeros(allowed.shape, dtype=p.dtype).masked_fill_(~allowed, torch.finfo(p.dtype).min)
    out = stock(target, tree.tokens, copy.deepcopy(snapshot), length, position_ids(tree, length),
                attention_mask=bias[None, None].to(p.device))
    return out.logits[0], features(out, layers)


def speculative_loop(target, drafter, prompt: torch.Tensor, spec: GenerationSpec, rng, gen: Generation,
                     cost_model) -> None:
    """DFlash (``spec.method`` "dflash": a chain) or DDTree ("ddtree": a tree), round by round."""
    s, bs, T = spec.sampling, spec.block_size, spec.sampling.temperature
    exact = spec.gdn_mode.exact  # "wy" and "fork" are exact; "naive" reads the tree as a chain
    rule = round_rule(tree_rule(drafter, spec.tree), spec.method)  # an object: DFlash its chain, DDTree the tree
    layers, dev = tuple(drafter.cfg.target_layer_ids), drafter.device
    # (0) prefill prompt[:-1] (the stock forward): the committed cache, and the features
    # [len(prompt) - 1, F] of those rows (hidden states of ``layers``) that the drafter attends to
    length, cache = prompt.numel() - 1, None
    new_rows = torch.zeros(0, len(layers) * target.config.hidden_size)
    if length:
        out = stock(target, prompt[:-1], None, 0)
        cache, new_rows = out.past_key_values, features(out, layers)
    root = int(prompt[-1])  # the newest token, not yet in the target's cache
    context = DynamicCache(config=drafter.model.config)  # the drafter's context K/V, one row per committed token
    while len(gen.tokens) < spec.max_new_tokens:
        # (1) draft: ONE drafter pass. The new rows' features join its context (KV injection), and
        # the block [root, MASK x (bs-1)] at positions C .. C+bs-1 sees the context and itself
        past = context.get_seq_length()
        C = past + new_rows.shape[0]  # the context's length once the new rows join it
        ids = torch.tensor([[root] + [drafter.cfg.mask_token_id] * (bs - 1)], device=dev)  # [1, bs]
        hidden = drafter.model(position_ids=torch.arange(past, C + bs, device=dev)[None],
                               noise_embedding=drafter.embed(ids),
                               target_hidden=new_rows.to(dev, drafter.model.fc.weight.dtype)[None],
                               past_key_values=context, use_cache=True)[0, 1:]  # [bs-1, H]
        context.crop(-bs)  # the block's bs rows leave the context
        logits = drafter.logits(hidden)  # [bs-1, V]: row d-1 scores depth d
        selector = None if drafter.selector is None else from_selector(drafter.selector, hidden, logits)
        draft = Draft(logits, selector)  # DFlash 2: its selector's q(c | parent, d) too
        # (2) tree: the rule's. DFlash: its chain of bs-1 nodes; DDTree: e.g. the best-first tree of
        # ``budget`` nodes; a rule of one's own is checked before the verify
        budget = bs - 1 if spec.method == "dflash" else cost_model.max_budget if spec.budget == "auto" else spec.budget
        auto = spec.budget == "auto" and spec.method == "ddtree"
        if auto and chain_candidate(cost_model, rule, 1):  # the chain, or the best prefix: the most per second
            tree = auto_with_chain(draft, root, rule, cost_model)
        else:
            tree = rule(draft, root, budget)
            if not rule.checked:
                check_tree(tree, root, budget, bs - 1, target.config.vocab_size, f"tree rule {rule.name!r}")
            if auto:  # the prefix that maximises tokens per predicted second
                tree = auto_trees([tree], cost_model)[0]
        proposal = rule.proposal(draft)  # the drafter's q at T > 0
        if s.draws_tree:  # the rejection walk: the tree's shape kept, its tokens drawn from q (generator)
            tree = proposal.sample_tree(tree, T, rng)
        # (3) verify. ``cache`` is the snapshot: every forward below runs on a copy of it
        if exact:
            target_logits, rows, caches = verify_fork(target, cache, length, tree, layers)
        else:
            target_logits, rows = verify_naive(target, cache, length, tree, layers)
        # (4) accept. T = 0: descend while a child holds the target's argmax; bonus = argmax there.
        # T > 0: the spec's walk. "target": the same walk on the target's samples. "rejection": child
        # x accepted with min(1, p(x) / q(x)), else p <- norm(max(0, p - q)); no child left: bonus ~ p
        if s.greedy:
            path, bonus = accept(tree, target_logits.argmax(-1))
        else:
            path, bonus = s.accept_rule(tree, target_logits, proposal, T, rng)
        gen.tokens += tree.tokens[path][1:].tolist() + [bonus]
        gen.entropies += entropies(target_logits[path], T)
        gen.acceptance_lengths.append(len(path))
        gen.tree_sizes.append(tree.num_nodes)
        # (5) commit the accepted path root .. path[-1]. Exact: its last node's cache holds exactly
        # that path, in every layer. Naive: the leaked rows and states are dropped; the accepted
        # tokens are replayed as a chain from the snapshot (exact: a chain cannot leak)
        cache = caches[path[-1]] if exact else replay(target, cache, length, tree.tokens[path])
        length += len(path)
        new_rows, root = rows[path], bonus  # the drafter's next context rows; the next round's root


def replay(target, snapshot, length: int, tokens: torch.Tensor):
    """The cache after ``tokens`` [n] run as a chain, one stock step per token, from a copy of
    ``snapshot`` (``length`` rows). One step at a time: Jamba's stock forward of several tokens on a
    cache starts its scan from a zero state (docs/background.md section 13)."""
    cache = copy.deepcopy(snapshot)
    for j in range(tokens.numel()):
        cache = stock(target, tokens[j:j + 1], cache, length + j).past_key_values
    return cache
