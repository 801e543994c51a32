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

import contextlib
import time
from unittest import mock

import torch


@torch.no_grad()
def official_generate(target, drafter, prompt_ids, max_new_tokens: int, block_size: int,
                      temperature: float = 0.0, seed: int = 0) -> dict:
    """``dflash_generate`` on ``drafter.model`` (the published ``DFlashDraftModel``):
    -> {"tokens": new tokens (t1 first), "acceptance_lengths": tokens per verify round}.

    ``return_stats=True`` gives the round lengths; it times with ``torch.cuda.synchronize``,
    so without a GPU its timer is swapped for ``time.perf_counter`` (nothing else changes)."""
    import dflash.model as dm
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1).to(target.device)
    torch.manual_seed(seed)
    timer = contextlib.nullcontext() if torch.cuda.is_available() \
        else mock.patch.object(dm, "_cuda_time", time.perf_counter)
    with timer:
        out = dm.dflash_generate(drafter.model, target, ids, max_new_tokens, None, temperature=temperature,
                                 block_size=block_size, return_stats=True)
    return {"tokens": out.output_ids[0, ids.shape[1]:].tolist(), "acceptance_lengths": list(out.acceptance_lengths)}


def lab_generate_aligned(target, drafter, prompt_ids, max_new_tokens: int, block_size: int, **kw):
    """The lab's DFlash from the reference loop's first state: prompt + its first token t1
    (greedy: the prefill's argmax) -> (tokens with t1 first, the lab's ``Generation``)."""
    from ..core.decode import generate
    ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1)
    first = int(target(ids[None].to(target.device)).logits[0, -1].argmax())
    gen = generate(target, drafter, ids.tolist() + [first], method="dflash", block_size=block_size,
                   max_new_tokens=max_new_tokens - 1, **kw)
    return [first] + gen.tokens, gen


@torch.no_grad()
def crop_rollback_error(target, prefix_ids, rejected_ids, next_id: int) -> float:
    """max |logits| error of the reference loop's rollback: prefill ``prefix_ids``, feed the
    k ``rejected_ids``, ``DynamicCache.crop(-k)``, feed ``next_id``; against a fresh forward
    of prefix + [next_id]. 0 up to rounding on attention-only targets."""
    from transformers import DynamicCache
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
    return (after - fresh).abs().max().item()
