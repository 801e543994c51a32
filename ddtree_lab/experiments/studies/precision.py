"""Is masked tree verification exact on MLA + MoE, and what does precision do to it?
(docs/background.md section 4: DeepSeek-V3 / Kimi K2.6 has no sequential state, so the ancestor
mask is exact up to floating-point rounding; in bf16 near-ties make tree and chain differ.)

- ``per_node_errors``: tree logits vs the per-path full forward, in a chosen dtype, with or
  without ``harness.float64_harness()``;
- ``routing_identical``: does every MoE router pick the same experts in the tree forward as
  in the per-path forward (hooks on ``DeepseekV3TopkRouter``)?
- ``near_tie_flips``: the argmax flips and their top-2 margins;
- ``chain_vs_tree_bf16``: the honest low-precision bar: tree argmax vs chain speculative
  verification of the same path vs AR decoding, all in the same dtype.
"""
from __future__ import annotations

import contextlib
import copy

import pandas as pd
import torch
from transformers import DynamicCache
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

from ...core import naive
from ...core.decode import first_draft
from ddtree_lab.core.spec import gdn_mode
from ...core.harness import float64_harness
from ...core.tree import DraftTree, build_tree, chain_tree
from ...core.verify import full_forward_logits, prefill, tree_logits, verify
from ddtree_lab.core.verify import commit
from ..plumbing.sweep import EXACT_MODE, names_mode


def in_dtype(model, dtype):
    """``model`` itself if already in ``dtype``, else a cast deep copy (the original is kept)."""
    return model if next(model.parameters()).dtype == dtype else copy.deepcopy(model).to(dtype)


def path_tokens(prefix_ids, tree: DraftTree, node: int) -> list[int]:
    """prefix + the tokens of root .. node."""
    tokens = tree.tokens.tolist()
    return [int(t) for t in prefix_ids] + [tokens[j] for j in tree.path_to(node)]


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """[n] float64 gap between the best and second-best logit of each row of [n, V]."""
    top = logits.double().topk(2, dim=-1).values  # [n, 2]
    return top[:, 0] - top[:, 1]


def per_node_errors(model, prefix_ids, tree: DraftTree, dtype=torch.float64, harness: bool = True,
                    gdn_mode: str = "wy", *, oracle: torch.Tensor | None = None) -> pd.DataFrame:
    """Tree verify vs per-path full forward, both computed in ``dtype``.

    harness: run both under ``harness.float64_harness()`` (dtype-preserving norms, softmax,
    router, GDN kernel); without it the stock modules upcast to float32 internally.
    oracle: the ``naive.tree_logits`` [N+1, V] of the same (model, dtype, harness), if already
    computed (they do not depend on ``gdn_mode``).
    One row per node: node, depth, dtype, harness, err (max |tree - path| over V, float64),
    argmax_tree, argmax_path, margin (top-2 gap of the path logits), flip (argmax differs).
    """
    m = in_dtype(model, dtype)
    with float64_harness() if harness else contextlib.nullcontext():
        tree_l = tree_logits(m, prefix_ids, tree, gdn_mode).double()  # [N+1, V]
        path_l = (naive.tree_logits(m, prefix_ids, tree) if oracle is None else oracle).double()  # [N+1, V]
    return pd.DataFrame({
        "node": range(len(tree)), "depth": tree.depths.numpy(), "dtype": str(dtype).removeprefix("torch."),
        "harness": harness, "err": (tree_l - path_l).abs().amax(-1).numpy(),
        "argmax_tree": tree_l.argmax(-1).numpy(), "argmax_path": path_l.argmax(-1).numpy(),
        "margin": top2_margin(path_l).numpy(),
        "flip": (tree_l.argmax(-1) != path_l.argmax(-1)).numpy(),
    })


@contextlib.contextmanager
def record_routing(model):
    """Yield a dict {layer: (scores [T, E], topk idx [T, k])} of each router's latest forward.

    scores = sigmoid(router logits) + e_score_correction_bias, the quantity top-k ranks
    (group masking aside: the toy and Kimi presets route within one group).
    """
    records: dict[int, tuple] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, DeepseekV3TopkRouter):
            layer = int(name.split("layers.")[1].split(".")[0])

            def hook(mod, args, out, layer=layer):
                scores = out[0].double().sigmoid() + mod.e_score_correction_bias.double()
                records[layer] = (scores.detach(), out[2].detach())
            handles.append(module.register_forward_hook(hook))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def _kth_gap(scores: torch.Tensor, k: int) -> float:
    """Gap between the k-th and (k+1)-th best router score of one row [E] (inf if E == k)."""
    top = scores.topk(min(k + 1, scores.numel())).values
    return float(top[k - 1] - top[k]) if top.numel() > k else float("inf")


def routing_identical(model, prefix_ids, tree: DraftTree, dtype=None, harness: bool = True) -> pd.DataFrame:
    """Per node and MoE layer: same routed experts in the tree forward as in the full forward?

    For an MLA (DeepSeek-V3) model, in ``dtype`` (None: the model's own), with the float64
    harness if ``harness``. Compares tree row i with the last position of the per-path full forward of
    node i. Columns: node, layer, experts_tree, experts_path (sorted tuples), same_experts,
    score_gap (min over both forwards of the k-th minus (k+1)-th router score: near-ties
    explain flips).
    """
    m = model if dtype is None else in_dtype(model, dtype)
    rows = []
    with float64_harness() if harness else contextlib.nullcontext(), record_routing(m) as rec:
        tree_logits(m, prefix_ids, tree)
        tree_routes = dict(rec)  # {layer: (scores, idx)}, rows = tree nodes
        for i in range(len(tree)):
            full_forward_logits(m, path_tokens(prefix_ids, tree, i))
            for layer, (s_path, idx_path) in rec.items():
                s_tree, idx_tree = tree_routes[layer]
                k = idx_tree.shape[-1]
                experts_tree = tuple(sorted(idx_tree[i].tolist()))
                experts_path = tuple(sorted(idx_path[-1].tolist()))
                rows.append({"node": i, "layer": layer, "experts_tree": experts_tree,
                             "experts_path": experts_path, "same_experts": experts_tree == experts_path,
                             "score_gap": min(_kth_gap(s_tree[i], k), _kth_gap(s_path[-1], k))})
    return pd.DataFrame(rows, columns=["node", "layer", "experts_tree", "experts_path",
                                       "same_experts", "score_gap"])


def near_tie_flips(errors: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``per_node_errors`` frame whose argmax flipped, with margin / err.

    A flip needs margin <= 2 err (each logit moved by at most err); the notebook shows the
    margins of flips sit at the size of the rounding error, far below typical margins.
    """
    flips = errors[errors["flip"]].copy()
    flips["margin_over_err"] = flips["margin"] / flips["err"]
    return flips.reset_index(drop=True)


def ar_path_logits(model, prefix_ids, tokens) -> torch.Tensor:
    """[len(tokens), V]: stock decoding with transformers' cache, ONE token per forward;
    row j = the logits after prefix + tokens[:j+1]."""
    cache = DynamicCache(config=model.config)
    rows = []
    with torch.no_grad():
        if len(prefix_ids):
            prefix = torch.as_tensor(list(prefix_ids), dtype=torch.long)[None]  # [1, T]
            model(prefix, past_key_values=cache, use_cache=True)
        for t in tokens:
            rows.append(model(torch.tensor([[int(t)]]), past_key_values=cache, use_cache=True).logits[0, -1])
    return torch.stack(rows)


def chain_vs_tree_bf16(model, prefix_ids, tree: DraftTree, dtype=torch.bfloat16,
                       gdn_mode: str = "wy") -> pd.DataFrame:
    """Per node, in ``dtype`` (stock modules, no harness): the argmax of

    - tree: the tree verify row;
    - chain: verifying the node's path as a chain in one forward (linear speculative decoding);
    - ar: AR decoding of the path, one token per forward with the cache (computed once per
      leaf, every node lies on a leaf's path).

    A tree and a chain forward both batch tokens, so their rounding differs from AR's
    single-token forwards; at low precision "tree == chain" is the honest bar. Columns: node,
    depth, argmax_tree, argmax_chain, argmax_ar, tree_eq_chain, tree_eq_ar, chain_eq_ar,
    margin (top-2 gap of the AR logits). Agreement rates: ``frame[[...eq...]].mean()``.
    """
    m = in_dtype(model, dtype)
    tree_arg = tree_logits(m, prefix_ids, tree, gdn_mode).argmax(-1)  # [N+1]
    cache, _ = prefill(m, prefix_ids)
    tokens = tree.tokens
    chain_arg = torch.stack([verify(m, cache, chain_tree(tokens[tree.path_to(i)[1:]], int(tokens[0])),
                                    gdn_mode).logits[-1].argmax() for i in range(len(tree))])
    ar = torch.zeros(len(tree), model.config.vocab_size, dtype=torch.float64)  # [N+1, V]
    for leaf in (i for i, kids in enumerate(tree.children) if not kids):
        path = tree.path_to(leaf)
        ar[path] = ar_path_logits(m, prefix_ids, tokens[path].tolist()).double()
    ar_arg = ar.argmax(-1)
    return pd.DataFrame({
        "node": range(len(tree)), "depth": tree.depths.numpy(),
        "argmax_tree": tree_arg.numpy(), "argmax_chain": chain_arg.numpy(), "argmax_ar": ar_arg.numpy(),
        "tree_eq_chain": (tree_arg == chain_arg).numpy(), "tree_eq_ar": (tree_arg == ar_arg).numpy(),
        "chain_eq_ar": (chain_arg == ar_arg).numpy(), "margin": top2_margin(ar).numpy(),
    })


def commit_state_error(model, prefix_ids, tree: DraftTree, path: list, gdn_mode: str = "wy") -> dict:
    """Max |difference| between the cache after verify + commit(path) and a fresh prefill of
    prefix + tokens[path]: attention rows ('kv'), GDN conv ('conv') and recurrent ('rec') states."""
    cache, _ = prefill(model, prefix_ids)
    out = verify(model, cache, tree, gdn_mode)
    commit(model, cache, out.pending, path)
    fresh, _ = prefill(model, list(prefix_ids) + tree.tokens[path].tolist())

    def err(a: dict, b: dict) -> float:
        pairs = [(x, y) for k in a for x, y in zip(a[k] if isinstance(a[k], tuple) else (a[k],),
                                                    b[k] if isinstance(b[k], tuple) else (b[k],))]
        return max((float((x.double() - y.double()).abs().max()) for x, y in pairs), default=0.0)
    return {"kv": err(cache.kv, fresh.kv), "conv": err(cache.conv, fresh.conv), "rec": err(cache.rec, fresh.rec)}


def exactness_table(pair, prompts=(0, 1), budget: int = 64, modes=("wy", "fork", "naive"), *,
                    block_size: int = 8) -> pd.DataFrame:
    """The README's exactness numbers for one ``Pair``: per GDN mode (an attention-only target: its one, ``EXACT_MODE``) and setting
    ('float64 + harness', 'float32'), the max per-node error of tree verification against
    each node's own path (``per_node_errors``) over the first DDTree tree (``block_size``) of each
    HumanEval prompt, argmax flips, and (float64, exact modes) the commit's cache error
    (``commit_state_error`` along the deepest path). One row per (mode, setting)."""
    cases = []
    for p in prompts:
        ids = pair.prompt_ids(p)
        draft = first_draft(pair.target, pair.drafter, ids, block_size).draft
        cases.append((ids[:-1], build_tree(draft.logits, ids[-1], budget)))
    rows = []
    for setting, dtype, proof in (("float64 + harness", torch.float64, True), ("float32", torch.float32, False)):
        m = in_dtype(pair.target, dtype)
        with float64_harness() if proof else contextlib.nullcontext():
            oracles = [naive.tree_logits(m, prefix, tree) for prefix, tree in cases]
        for mode in (modes if names_mode(pair.arch) else (EXACT_MODE,)):
            errs = [per_node_errors(m, prefix, tree, dtype, proof, mode, oracle=oracle)
                    for (prefix, tree), oracle in zip(cases, oracles)]
            commit = _commit_err(m, cases, mode) if proof and gdn_mode(mode).exact else None
            rows.append({"arch": pair.arch, "mode": mode, "setting": setting, "budget": budget,
                         "prompts": len(cases), "max_err": max(float(e.err.max()) for e in errs),
                         "flips": sum(int(e.flip.sum()) for e in errs), "commit_err": commit})
    return pd.DataFrame(rows).sort_values(["mode", "setting"], kind="stable", ignore_index=True)


def _commit_err(model, cases, mode: str) -> float:
    """Max cache error after verify + commit of each tree's deepest path (float64 harness)."""
    with float64_harness():
        return max(max(commit_state_error(model, prefix, tree, tree.path_to(int(tree.depths.argmax())),
                                          mode).values()) for prefix, tree in cases)
