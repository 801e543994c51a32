"""Minimal reproduction: transformers' DynamicCache.crop does not roll back the Gated DeltaNet
recurrent state, so dflash's reference loop (dflash_generate) departs from greedy AR decoding
on a Qwen3.5 hybrid. Standalone: torch, transformers and dflash only, random-init models, CPU,
well under 30 s.

    python scripts/dflash_gdn_rollback.py

Prints (1) the logit error of "prefill, feed k tokens, crop k, feed one token" against a fresh
forward, for k = 1..15, and (2) whether dflash_generate equals AR on random prompts.
"""
import time
from unittest import mock

import torch
from transformers import DynamicCache, Qwen3_5TextConfig, Qwen3_5ForCausalLM, Qwen3Config

import dflash.model as dm

V, H, L = 256, 64, 4


def target_model(seed=0):
    torch.manual_seed(seed)
    cfg = Qwen3_5TextConfig(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=L,
                            num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                            linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                            linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
                            max_position_embeddings=512, tie_word_embeddings=False,
                            initializer_range=0.1)
    return Qwen3_5ForCausalLM(cfg).eval()


def drafter_model(seed=1, block_size=8):
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                      num_target_layers=L, dflash_config={"block_size": block_size, "mask_token_id": V - 1,
                                                          "target_layer_ids": [1]})
    return dm.DFlashDraftModel(cfg).eval()


@torch.no_grad()
def rollback_error(target, prefix, rejected, token):
    """max |logits| error of crop-then-feed against a fresh forward of prefix + [token]."""
    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()  # what dflash_generate does before it crops
    target(prefix, past_key_values=cache, use_cache=True)
    target(rejected, past_key_values=cache, use_cache=True)
    cache.crop(-rejected.shape[1])  # roll back the k rejected tokens, as dflash_generate does
    after_crop = target(token, past_key_values=cache, use_cache=True).logits[0, -1]
    fresh = target(torch.cat([prefix, token], 1)).logits[0, -1]
    return (after_crop - fresh).abs().max().item()


@torch.no_grad()
def greedy_ar(target, prompt, n):
    """Greedy AR on transformers' own cache (no crop anywhere)."""
    cache, out, ids = DynamicCache(config=target.config), [], prompt
    for _ in range(n):
        ids = target(ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        out.append(ids.item())
    return out


def main():
    t0 = time.perf_counter()
    target, drafter = target_model(), drafter_model()
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(V - 1, (1, 24), generator=gen)
    print("rejected tokens k -> max |logit error| after crop(k), against a fresh forward")
    for k in range(1, 16):
        err = rollback_error(target, prefix, torch.randint(V - 1, (1, k), generator=gen),
                             torch.randint(V - 1, (1, 1), generator=gen))
        print(f"  k = {k:2d}: {err:.3e}")
    departs, n_new, n_prompts = 0, 24, 6
    with mock.patch.object(dm, "_cuda_time", time.perf_counter):  # return_stats syncs CUDA otherwise
        for p in range(n_prompts):
            prompt = torch.randint(V - 1, (1, 12), generator=gen)
            out = dm.dflash_generate(drafter, target, prompt, n_new, None, block_size=8, return_stats=True)
            official = out.output_ids[0, prompt.shape[1]:].tolist()
            ar = greedy_ar(target, prompt, len(official))
            first = next((i for i, (a, b) in enumerate(zip(ar, official)) if a != b), None)
            departs += first is not None
            print(f"prompt {p}: dflash_generate == AR: {first is None}"
                  + ("" if first is None else f" (first divergence at new token {first})"))
    print(f"dflash_generate departs from greedy AR on {departs} of {n_prompts} random prompts "
          f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
