"""The algorithm on one page: ONE sequence, every step of a round inline, the stock forwards
called directly. The specification ``decode.generate`` is tested against token for token
(DFlash, arXiv 2602.06036, section 3; DDTree, arXiv 2604.12989, sections 3-4;
docs/background.md sections 2-4 and 9-10).

    prefill prompt[:-1]; root = prompt[-1]
    per round: (1) draft   ONE drafter pass over [root, MASK x (bs-1)] -> logits [bs-1, V]
               (2) tree    the spec's tree rule (``rules``): the DFlash chain / best-first DDTree
                           (unary marginals, or conditional: DFlash 2's selector, q(child |
                           parent token)), or a rule of one's own (its tree checked)
               (3) verify  ONE stock target forward over root + nodes, tree attention mask
               (4) accept  the argmax walk (T = 0) or the spec's seeded T > 0 walk
               (5) commit  the accepted rows; each GDN layer's state by its mode's rule
    AR (``ar_loop``) drafts nothing: one stock forward per token.

Every ``GenerationSpec`` of one prompt runs here, ``gdn_mode`` "naive" included: its leak (the
flattened tree read as a chain by the GDN layers) is reproduced, and so is its commit (a
branched accepted path re-verified as a chain, exact in naive mode). The T > 0 walks draw
from one generator seeded ``seed`` in the fast loop's order, so the tokens agree bit for bit.
Left to the fast loop: batches, packing, buffers kept across rounds, ``compile`` (this
loop runs eagerly whatever ``spec.compile`` says) and the ``on_round`` hook. Budget "auto" takes
the fast loop's ``cost_model`` and cuts each tree as it does (``allocate.auto_trees``).
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch
from transformers import DynamicCache

from .adapter import loop_ready
from .allocate import auto_trees
from .conditional import from_selector
from .decode import Generation, check_generate_args, entropies, round_rule, tree_rule
from .drafter import Draft
from .gdn_layer import GdnMode, tree_layer
from .gdn_tree import commit_conv_state
from .rules import check_tree
from .sampling import choose_tokens
from .spec import GenerationSpec
from .tree import DraftTree, accept, chain_of
from .verify import prefill, tree_buffers


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
    with loop_ready(target):  # the lab's kernels: GDN layers routed to the tree layer, grouped experts
        if spec.method == "ar":
            ar_loop(target, prompt, spec, rng, gen)
        else:
            speculative_loop(target, drafter, prompt, spec, rng, gen, cost_model)
    gen.tokens, gen.entropies = gen.tokens[:spec.max_new_tokens], gen.entropies[:spec.max_new_tokens]
    gen.timings["total"] = time.perf_counter() - t0
    return gen


def ar_loop(target, prompt: torch.Tensor, spec: GenerationSpec, rng, gen: Generation) -> None:
    """AR: one stock forward per token on transformers' ``DynamicCache``."""
    device, T = next(target.parameters()).device, spec.sampling.temperature
    cache = DynamicCache(config=target.config)
    logits = target(prompt[None].to(device), past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    while True:  # logits [1, V]
        token = choose_tokens(logits, T, rng)  # [1]: argmax, or a sample of softmax(logits / T)
        gen.tokens.append(int(token))
        gen.entropies += entropies(logits, T)
        gen.acceptance_lengths.append(1)
        gen.tree_sizes.append(0)
        if len(gen.tokens) == spec.max_new_tokens:
            return
        logits = target(token[:, None].to(device), past_key_values=cache, use_cache=True).logits[:, -1]


class Committed(NamedTuple):
    """The target's state between rounds, never written in place (so the state before a verify
    is its own snapshot): ``length`` committed rows, attention kv {layer: (keys, values)}
    [1, h, length, d] (MLA: its latents), GDN conv {layer: [C, K]} and rec {layer: [H, dk, dv]}."""
    length: int
    kv: dict
    conv: dict
    rec: dict


class TreeView:
    """The cache the stock forward is handed in a verify (it calls ``update`` in every attention
    layer and, through ``adapter.route_gdn_trees``, ``gdn_tree_layer`` in every GDN layer).
    Reads ``state``, writes nothing to it; collects the tree rows' kv and the GDN records."""

    def __init__(self, state: Committed, tree: DraftTree, mode: GdnMode):
        self.state, self.mode = state, mode
        self.buf = tree_buffers(tree, state.length, mode)  # positions, ancestor masks, the GDN layers' parents
        self.kv, self.records = {}, {}

    def update(self, keys, values, layer_idx, *args, **kwargs):
        """Tree rows [1, h, n, d] -> the committed rows, then them: [1, h, L + n, d]."""
        past = self.state.kv.get(layer_idx)
        if past is not None:
            keys, values = torch.cat([past[0], keys], -2), torch.cat([past[1], values], -2)
        self.kv[layer_idx] = (keys, values)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.state.length

    def gdn_tree_layer(self, m, hidden: torch.Tensor) -> torch.Tensor:
        """GDN layer m on the tree [1, n, D] -> [1, n, D], from the committed conv window and state
        along ``mode.parents(tree)`` (naive: a chain, the leak); its record kept for the commit."""
        i = m.layer_idx
        out, self.records[i] = tree_layer(m, hidden[0], self.state.conv[i], self.state.rec[i], self.buf, self.mode)
        return out[None]


def verify_tree(target, state: Committed, tree: DraftTree, mode: GdnMode) -> tuple:
    """ONE stock forward over the n = N+1 nodes of ``tree``: node i at position L + depth(i),
    seeing the L committed rows and its own ancestors -> (the output: logits [1, n, V], hidden
    states; the ``TreeView`` holding the tree rows)."""
    p, view = next(target.parameters()), TreeView(state, tree, mode)
    allowed = torch.cat([torch.ones(len(tree), state.length, dtype=torch.bool), view.buf.anc], 1)  # [n, L + n]
    bias = torch.zeros(allowed.shape, dtype=p.dtype, device=p.device)
    bias = bias.masked_fill_(~allowed.to(p.device), torch.finfo(p.dtype).min)[None, None]  # [1, 1, n, L + n]
    mask = {"full_attention": bias, "linear_attention": None} if state.conv else bias
    out = target(tree.tokens[None].to(p.device), attention_mask=mask,
                 position_ids=view.buf.positions[None].to(p.device),  # [1, n]: L + depth
                 past_key_values=view, use_cache=True, output_hidden_states=True)
    return out, view


def speculative_loop(target, drafter, prompt: torch.Tensor, spec: GenerationSpec, rng, gen: Generation,
                     cost_model) -> None:
    """DFlash (``spec.method`` "dflash": a chain) or DDTree ("ddtree": a tree), round by round."""
    s, mode, bs, T = spec.sampling, spec.gdn_mode, spec.block_size, spec.sampling.temperature
    rule = round_rule(tree_rule(drafter, spec.tree), spec.method)  # an object: DFlash its chain, DDTree the tree
    layers, dev = tuple(drafter.cfg.target_layer_ids), drafter.device
    # (0) prefill prompt[:-1] (the stock forward): the target's committed state, and the features
    # [len(prompt) - 1, F] of those rows (hidden states of ``layers``) that the drafter attends to
    cache, first = prefill(target, prompt[:-1], layers)
    state = Committed(cache.length, cache.kv, cache.conv, cache.rec)
    features, root = first.features, int(prompt[-1])  # root: the newest token, not yet in the target's cache
    context = DynamicCache(config=drafter.model.config)  # the drafter's context K/V, one row per committed token
    while len(gen.tokens) < spec.max_new_tokens:
        # (1) draft: ONE drafter pass. The new rows' features join its context (KV injection), and
        # the block [root, MASK x (bs-1)] at positions C .. C+bs-1 sees the context and itself
        past = context.get_seq_length()
        C = past + features.shape[0]  # the context's length once the new rows join it
        ids = torch.tensor([[root] + [drafter.cfg.mask_token_id] * (bs - 1)], device=dev)  # [1, bs]
        hidden = drafter.model(position_ids=torch.arange(past, C + bs, device=dev)[None],
                               noise_embedding=drafter.embed(ids),
                               target_hidden=features.to(dev, drafter.model.fc.weight.dtype)[None],
                               past_key_values=context, use_cache=True)[0, 1:]  # [bs-1, H]
        context.crop(-bs)  # the block's bs rows leave the context
        logits = drafter.logits(hidden)  # [bs-1, V]: row d-1 scores depth d
        selector = None if drafter.selector is None else from_selector(drafter.selector, hidden, logits)
        draft = Draft(logits, selector)  # DFlash 2: its selector's q(c | parent, d) too
        # (2) tree: the rule's. DFlash: its chain (argmax per depth, or the selector's greedy path
        # walk) of bs-1 nodes; DDTree: e.g. the best-first tree of ``budget`` nodes (heaviest paths
        # of the marginals, or of the selector's q); a rule of one's own is checked before the verify
        budget = bs - 1 if spec.method == "dflash" else cost_model.max_budget if spec.budget == "auto" else spec.budget
        tree = rule(draft, root, budget)
        if not rule.checked:
            check_tree(tree, root, budget, bs - 1, target.config.vocab_size, f"tree rule {rule.name!r}")
        if spec.budget == "auto" and spec.method == "ddtree":  # the prefix that maximises tokens per predicted second
            tree = auto_trees([tree], cost_model)[0]
        proposal = rule.proposal(draft)  # the drafter's q at T > 0
        if s.draws_tree:  # the rejection walk: the tree's shape kept, its tokens drawn from q (generator)
            tree = proposal.sample_tree(tree, T, rng)
        # (3) verify: ONE stock target forward, the tree attention mask (``verify_tree``)
        out, view = verify_tree(target, state, tree, mode)
        target_logits = out.logits[0]  # [N+1, V]: row i = the target's next token after path(i)
        # (4) accept. T = 0: descend while a child holds the target's argmax; bonus = argmax there.
        # T > 0: the spec's walk. "target": the same walk on the target's samples. "rejection": child
        # x accepted with min(1, p(x) / q(x)), else p <- norm(max(0, p - q)); no child left: bonus ~ p
        if s.greedy:
            path, bonus = accept(tree, target_logits.argmax(-1))
        else:
            path, bonus = s.accept_rule(tree, target_logits, proposal, T, rng)
        new_features = torch.cat([out.hidden_states[i + 1][0] for i in layers], -1)[path]  # [len(path), F]
        gen.tokens += tree.tokens[path][1:].tolist() + [bonus]
        gen.entropies += entropies(target_logits[path], T)
        gen.acceptance_lengths.append(len(path))
        gen.tree_sizes.append(tree.num_nodes)
        # (5) commit: keep the committed rows and the accepted path's. Naive mode leaked into a
        # branched path's rows (its GDN layers read the tree as a chain): re-verify those tokens as a
        # chain (exact in naive mode) and keep that chain's rows instead
        kept = path
        if view.records and mode.needs_rescore(torch.tensor(path)):
            _, view = verify_tree(target, state, chain_of(tree.tokens[path[1:]], root), mode)
            kept = list(range(len(path)))
        rows = list(range(state.length)) + [state.length + j for j in kept]
        # each GDN layer: conv window = its last K inputs along the path; recurrent state by the
        # mode's commit rule (``GdnMode.state``): fork, the accepted node's state stored by the
        # verify (its per-node snapshot); wy / naive, the exact closed form W1 from the pre-verify
        # state S0 (``gdn_tree.wy_state``); the state before the verify is ``state``, untouched
        state = Committed(state.length + len(kept),
                          {i: (k[:, :, rows], v[:, :, rows]) for i, (k, v) in view.kv.items()},
                          {i: commit_conv_state(state.conv[i], r.x[kept]) for i, r in view.records.items()},
                          {i: mode.state(r, kept).to(state.rec[i].dtype) for i, r in view.records.items()})
        features, root = new_features, bonus  # the drafter's next context rows; the next round's root
