"""The field's reference loop beside the lab's: ``dflash.model.dflash_generate`` (z-lab's
``dflash`` package) on the same target and drafter, and the rollback it relies on.

``official_generate`` runs the reference loop as shipped. On a pure-attention target (MLA) it
equals greedy AR; on a Gated DeltaNet hybrid it does not, because transformers'
``DynamicCache.crop`` (which the loop calls after every verify) rolls back attention K/V and
the conv states but NOT the GDN recurrent state: ``crop_rollback_error`` measures that error.
The lab's exact loop (``generate``) keeps its own snapshot / commit and stays equal to AR.

Alignment with the lab's rounds: ``dflash_generate`` prefills the whole prompt P and takes its
first token t1 from the prefill; its first round drafts from P's features with root t1. The
lab's ``generate(P + [t1])`` starts from exactly that state (prefill of P, root t1), so the
two loops' rounds line up one for one (``lab_generate_aligned``).
"""
from __future__ import annotations

import time
import dflash.model as dm
import pandas as pd
import torch
from transformers import DynamicCache

from ...core import naive
from ddtree_lab.core.verify import loop_ready
from ...core.compiled import compiled_module
from ...core.decode import PHASES, generate, start
from ...train.loops import generation_tags
from ..plumbing.summary import ar_divergence
from ..plumbing.sweep import run_config
from .lookup import run_lookup


@torch.no_grad()
def official_generate(target, drafter, prompt_ids, max_new_tokens: int, block_size: int,
                      temperature: float = 0.0, *, seed: int = 0, compile: bool = False) -> dict:
    """``dflash_generate`` on ``drafter.model`` (the published ``DFlashDraftModel``), as shipped:
    -> {"tokens": new tokens (t1 first), "acceptance_lengths": tokens per verify round}.
    It runs on the kernels of every lab loop (``verify.loop_ready``: MoE experts as
    ``grouped_mm``), so a ratio of the two loops compares loops, not kernels.
    compile: the loop as shipped on compiled copies of both models, as the lab's compiled loop
    (``core.compiled.compiled_module``).

    The round lengths are read without touching the loop (its own ``return_stats`` timer needs
    CUDA): a forward pre-hook on ``target`` sees the target cache's length at every call, and
    the loop crops that cache to the committed length before each verify, so consecutive
    lengths differ by what each round committed (the last round: up to the output's end)."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1).to(target.device)
    torch.manual_seed(seed)
    lengths: list[int] = []
    model, draft = (compiled_module(target), compiled_module(drafter.model)) if compile else (target, drafter.model)
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["past_key_values"].get_seq_length()), with_kwargs=True)
    try:
        with loop_ready(target):
            out = dm.dflash_generate(draft, model, ids, max_new_tokens, None, temperature=temperature,
                                     block_size=block_size)
    finally:
        hook.remove()
    starts = lengths[1:] + [out.shape[1] - 1]  # after the prefill call: the committed length at each round
    return {"tokens": out[0, ids.shape[1]:].tolist(),
            "acceptance_lengths": [b - a for a, b in zip(starts, starts[1:])]}


def lab_generate_aligned(target, drafter, prompt_ids, max_new_tokens: int, block_size: int, **kw):
    """The lab's DFlash from the reference loop's first state: prompt + its first token t1
    (greedy: the prefill's argmax) -> (tokens with t1 first, the lab's ``Generation``)."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1)
    first = int(target(ids[None].to(target.device)).logits[0, -1].argmax())
    gen = generate(target, drafter, ids.tolist() + [first], method="dflash", block_size=block_size,
                   max_new_tokens=max_new_tokens - 1, **kw)
    return [first] + gen.tokens, gen


@torch.no_grad()
def crop_rollback_logits(target, prefix_ids, rejected_ids, next_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(after, fresh) next-token logits [V]: the reference loop's rollback (prefill
    ``prefix_ids``, feed the k ``rejected_ids``, ``DynamicCache.crop(-k)``, feed ``next_id``)
    and a fresh forward of prefix + [next_id]."""
    dev = target.device
    prefix = torch.as_tensor(prefix_ids, dtype=torch.long).reshape(1, -1).to(dev)
    rejected = torch.as_tensor(rejected_ids, dtype=torch.long).reshape(1, -1).to(dev)
    nxt = torch.tensor([[next_id]], device=dev)
    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()
    target(prefix, past_key_values=cache, use_cache=True)
    target(rejected, past_key_values=cache, use_cache=True)
    cache.crop(-rejected.shape[1])
    after = target(nxt, past_key_values=cache, use_cache=True).logits[0, -1]
    fresh = target(torch.cat([prefix, nxt], 1)).logits[0, -1]
    return after, fresh


def crop_rollback_error(target, prefix_ids, rejected_ids, next_id: int) -> float:
    """max |logits| error of ``crop_rollback_logits``: 0 up to rounding on attention-only targets."""
    after, fresh = crop_rollback_logits(target, prefix_ids, rejected_ids, next_id)
    return (after - fresh).abs().max().item()


@torch.no_grad()
def rollback_curve(pairs: dict, prompt_ids: list[list[int]], max_rejected: int = 15):
    """Per (arch, prompt, k = 1..max_rejected rejected tokens): the max logit error of the
    crop rollback and, at T = 1, the total-variation distance between the next-token
    distribution after the crop and a fresh forward's (the reference loop samples from the
    former). The rejected tokens are the drafter's own first block proposals (argmax), the
    next token the target's greedy one. -> DataFrame. Needs a drafter block of at least
    max_rejected + 1."""
    rows = []
    for arch, pair in pairs.items():
        for i, ids in enumerate(prompt_ids):
            _, features, _ = start(pair.target, pair.drafter, torch.as_tensor(ids))
            drafts = naive.propose(pair.drafter, DynamicCache(config=pair.drafter.model.config), features,
                                   ids[-1], pair.drafter.cfg.block_size).argmax(-1).tolist()
            nxt = int(pair.target(torch.as_tensor(ids)[None].to(pair.target.device)).logits[0, -1].argmax())
            for k in range(1, max_rejected + 1):
                after, fresh = crop_rollback_logits(pair.target, ids, drafts[:k], nxt)
                tv = 0.5 * (torch.softmax(after.double(), -1) - torch.softmax(fresh.double(), -1)).abs().sum().item()
                rows.append({"arch": arch, "prompt": i, "rejected": k, "max_logit_error": (after - fresh).abs().max().item(),
                             "tv_t1": tv})
    return pd.DataFrame(rows)


def official_metrics(pair, prompt_ids: list[int], block_size: int, max_new_tokens: int,
                     temperature: float, seed: int) -> dict:
    """One results-store row of the reference loop (``sweep.run_config`` for method
    "official"): tokens, round lengths, wall seconds (no phase split: the loop is timed whole),
    loop tags (``loops.generation_tags``). Its first token comes from the prefill, so its rounds
    start after it."""
    t0 = time.perf_counter()
    out = official_generate(pair.target, pair.drafter, prompt_ids, max_new_tokens, block_size, temperature, seed=seed)
    total = time.perf_counter() - t0
    tokens, acc = out["tokens"], out["acceptance_lengths"]
    timings = dict.fromkeys(PHASES + ("prefill",), 0.0) | {"total": total}
    return {"tokens": tokens, "acceptance_lengths": acc, "tree_sizes": [block_size - 1] * len(acc),
            "timings": timings, "tau": sum(acc) / max(1, len(acc)), "tokens_per_s": len(tokens) / max(total, 1e-12),
            "rounds": len(acc), "prompt_len": len(prompt_ids), "entropy": float("nan"),
            **generation_tags(prompt_ids, tokens, acc, committed=1)}


def chain_divergence(frame):
    """Per non-AR row of a results frame: (arch, method, block_size, prompt,
    first_divergence), the first new token that differs from AR on the same prompt (None:
    identical)."""
    div = ar_divergence(frame, key=("arch", "max_new_tokens"))
    rows = [{"arch": a, "method": meth, "block_size": b, "prompt": p, "first_divergence": d}
            for a, meth, b, p, d in zip(frame.arch, frame.method, frame.block_size, frame.prompt, div)
            if meth != "ar" and not isinstance(d, float)]
    return pd.DataFrame(rows, columns=["arch", "method", "block_size", "prompt", "first_divergence"])


def run_with_official(cfg: dict, prompt_id: int, pair) -> dict:
    """``sweep.run_config``, plus the field's loops beside the lab's: method "official", the
    reference loop (``official_metrics``), and method "lookup", transformers' prompt-lookup
    decoding (``lookup.run_lookup``), for grids that hold them (``run_sweep(..., runner=run_with_official)``)."""
    if cfg["method"] == "lookup":
        return run_lookup(cfg, prompt_id, pair)
    if cfg["method"] != "official":
        return run_config(cfg, prompt_id, pair)
    ids = pair.prompt_ids(prompt_id)
    return official_metrics(pair, ids, cfg["block_size"], cfg["max_new_tokens"], cfg["temperature"], prompt_id)
