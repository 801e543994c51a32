"""Tiny configs of every hybrid class the pinned transformers (5.23.0) ships, one recurrent family
each (docs/background.md section 13): the tests' toys (random weights, seconds on a CPU), and the
trained targets of ``ddtree-lab tiny-target --family F``.

``tiny_config(name, vocab_size, width)``: the class's own config with ``width`` as hidden size and
4 decoder layers (3 recurrent : 1 attention where the class takes a layer pattern, as Qwen3.5's
3:1); every recurrent width keeps a multiple of 8.
"""
from __future__ import annotations

import torch
import transformers as hf

# --family name of ``tiny-target`` -> the class it builds
FAMILY_CLASSES = {"attention": "Qwen3ForCausalLM", "gdn": "Qwen3_5ForCausalLM", "kda": "KimiLinearForCausalLM",
                  "mamba2": "NemotronHForCausalLM", "short_conv": "Lfm2ForCausalLM"}
# every hybrid class of the every-hybrid issue (68), with its recurrent family
HYBRIDS = {"Qwen3_5ForCausalLM": "gdn", "OlmoHybridForCausalLM": "gdn", "KimiLinearForCausalLM": "kda",
           "NemotronHForCausalLM": "mamba2", "FalconH1ForCausalLM": "mamba2", "GraniteMoeHybridForCausalLM": "mamba2",
           "BambaForCausalLM": "mamba2", "Zamba2ForCausalLM": "mamba2", "Lfm2ForCausalLM": "short_conv",
           "Lfm2MoeForCausalLM": "short_conv", "MiniMaxForCausalLM": "lightning", "JambaForCausalLM": "mamba1"}


def _ids(vocab_size: int) -> dict:
    return dict(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny_config(name: str, vocab_size: int = 64, width: int = 32):
    """The config of class ``name`` (a key of ``HYBRIDS`` or ``FAMILY_CLASSES``' values) at hidden
    size ``width`` (a multiple of 16), 4 layers, eager attention and eager experts."""
    w, h = width, width // 16  # heads of 16
    common = dict(**_ids(vocab_size), hidden_size=w, intermediate_size=2 * w, num_hidden_layers=4,
                  num_attention_heads=h, num_key_value_heads=max(1, h // 2), max_position_embeddings=4096,
                  tie_word_embeddings=True)
    mamba = dict(mamba_n_heads=w // 8, mamba_d_head=8, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4,
                 mamba_chunk_size=16, mamba_expand=1)
    make = {
        "Qwen3ForCausalLM": lambda: hf.Qwen3Config(**common, head_dim=16),
        "Qwen3_5ForCausalLM": lambda: hf.Qwen3_5TextConfig(
            **common, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=max(1, h // 2), linear_num_value_heads=h,
            layer_types=["linear_attention"] * 3 + ["full_attention"]),
        "OlmoHybridForCausalLM": lambda: hf.OlmoHybridConfig(
            **common, linear_num_key_heads=h, linear_num_value_heads=h, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4,
            layer_types=["linear_attention"] * 3 + ["full_attention"]),
        "KimiLinearForCausalLM": lambda: hf.KimiLinearConfig(
            **{**common, "num_key_value_heads": h}, head_dim=16, moe_intermediate_size=w // 2, num_experts=4, num_experts_per_token=2,
            first_k_dense_replace=1, kv_lora_rank=w // 2, q_lora_rank=None, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, mla_use_nope=True,
            linear_attn_config={"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": h, "head_dim": 16,
                                "short_conv_kernel_size": 4}),
        "NemotronHForCausalLM": lambda: hf.NemotronHConfig(
            **common, head_dim=16, hybrid_override_pattern="MM*M", mamba_num_heads=w // 8, mamba_head_dim=8,
            ssm_state_size=16, n_groups=1, conv_kernel=4, chunk_size=16, expand=1),
        "FalconH1ForCausalLM": lambda: hf.FalconH1Config(
            **common, head_dim=16, mamba_d_ssm=w, mamba_n_heads=w // 8, mamba_d_head=8, mamba_d_state=16,
            mamba_n_groups=1, mamba_d_conv=4, mamba_chunk_size=16, mamba_expand=1),
        "GraniteMoeHybridForCausalLM": lambda: hf.GraniteMoeHybridConfig(
            **common, layer_types=["mamba", "mamba", "mamba", "attention"], num_local_experts=4,
            num_experts_per_tok=2, shared_intermediate_size=w, **mamba),
        "BambaForCausalLM": lambda: hf.BambaConfig(**common, attn_layer_indices=[3], **mamba),
        "Zamba2ForCausalLM": lambda: hf.Zamba2Config(
            **common, layers_block_type=["mamba", "mamba", "hybrid", "mamba"], mamba_d_state=16, mamba_d_conv=4,
            mamba_expand=2, mamba_ngroups=1, mamba_headdim=8, n_mamba_heads=2 * w // 8, chunk_size=16,
            num_mem_blocks=1, use_mem_rope=True),
        "Lfm2ForCausalLM": lambda: hf.Lfm2Config(
            **common, layer_types=["conv", "conv", "conv", "full_attention"], conv_L_cache=3,
            block_auto_adjust_ff_dim=False),
        "Lfm2MoeForCausalLM": lambda: hf.Lfm2MoeConfig(
            **common, layer_types=["conv", "conv", "conv", "full_attention"], conv_L_cache=3,
            moe_intermediate_size=w // 2, num_experts=4, num_experts_per_tok=2, num_dense_layers=1),
        "MiniMaxForCausalLM": lambda: hf.MiniMaxConfig(
            **common, head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
            num_local_experts=4, num_experts_per_tok=2, block_size=16),
        "JambaForCausalLM": lambda: hf.JambaConfig(
            **common, attn_layer_period=4, attn_layer_offset=3, expert_layer_period=2, expert_layer_offset=1,
            num_experts=4, num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
            mamba_dt_rank=max(1, w // 16)),
    }
    if name not in make:
        raise ValueError(f"name must be one of {sorted(make)}, got {name!r}")
    cfg = make[name]()
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def build_tiny(name: str, *, vocab_size: int = 64, width: int = 32, dtype=torch.float64, seed: int = 0):
    """A random-weight model of class ``name`` at ``tiny_config``'s size, in eval mode."""
    torch.manual_seed(seed)
    return getattr(hf, name)(tiny_config(name, vocab_size, width)).to(dtype).eval()
