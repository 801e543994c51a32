"""The float64 proof's harness, apart from the code it tests.

``float64_harness()`` swaps the float32 casts of the stock modules (RMSNorms, eager softmax,
the MoE router, the GDN kernels) for dtype-preserving versions, and the adapter's
``kernel_dtype`` with them, so a float64 model computes in float64 end to end and tree vs full
forward can be compared to ~1e-14. For tests and the proof notebooks only: nothing in the
decoding path imports this module or asks whether it is active.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dsv3
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35

from . import adapter, gdn_tree


def _same_dtype(dtype: torch.dtype) -> torch.dtype:
    """``adapter.kernel_dtype`` under the harness: the kernels keep the model's dtype."""
    return dtype


def _rmsnorm_zero_centered(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.to(x.dtype))


def _rmsnorm_gated(self, h, gate):
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight.to(h.dtype) * h * F.silu(gate.to(h.dtype))


def _rmsnorm_plain(self, h):
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight.to(h.dtype) * h


def _eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    rep = module.num_key_value_groups
    key, value = (t.repeat_interleave(rep, dim=1) if rep > 1 else t for t in (key, value))
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _router(self, h):
    """DeepseekV3TopkRouter.forward without the float32 cast (same group-limited top-k)."""
    h = h.reshape(-1, self.hidden_dim)
    logits = F.linear(h, self.weight.to(h.dtype))
    scores = logits.sigmoid()
    choice = scores + self.e_score_correction_bias.to(h.dtype)
    per_group = self.num_experts // self.num_group
    group_scores = choice.view(-1, self.num_group, per_group).topk(min(2, per_group), dim=-1)[0].sum(-1)
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    keep = torch.zeros_like(group_scores).scatter_(1, group_idx, 1).bool()
    choice = choice.masked_fill(~keep.repeat_interleave(per_group, dim=1), float("-inf"))
    idx = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
    w = scores.gather(1, idx)
    if self.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return logits, w * self.routed_scaling_factor, idx


def _chunk_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                use_qk_l2norm_in_kernel=False, **kwargs):
    """Dtype-preserving stand-in for transformers' GDN kernels (batch 1), via gdn_tree."""
    q, k = gdn_tree.normalize_qk(query[0], key[0], value.shape[2])
    S0 = initial_state[0] if initial_state is not None else q.new_zeros(q.shape[1], q.shape[2], value.shape[-1])
    o, S = gdn_tree.gated_delta_chain(q, k, value[0], g[0].to(q.dtype), beta[0].to(q.dtype), S0.to(q.dtype))
    return o[None], (S[None] if output_final_state else None)


@contextlib.contextmanager
def float64_harness() -> Iterator[None]:
    """Swap the float32 casts of the stock modules for dtype-preserving versions.

    For tests and the proof notebook only: with it, a float64 model computes in float64 end
    to end, so tree vs full forward can be compared to ~1e-14.
    """
    patches = [(qwen35.Qwen3_5RMSNorm, "forward", _rmsnorm_zero_centered),
               (qwen35.Qwen3_5RMSNormGated, "forward", _rmsnorm_gated),
               (dsv3.DeepseekV3RMSNorm, "forward", _rmsnorm_plain),
               (qwen35, "eager_attention_forward", _eager_attention),
               (dsv3, "eager_attention_forward", _eager_attention),
               (dsv3.DeepseekV3TopkRouter, "forward", _router),
               (qwen35, "torch_chunk_gated_delta_rule", _chunk_rule),
               (qwen35, "torch_recurrent_gated_delta_rule", _chunk_rule),
               (adapter, "kernel_dtype", _same_dtype)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
