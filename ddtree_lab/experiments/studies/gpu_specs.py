"""The public numbers the GPU projection reads (issue 61, item 2), each with its source:
accelerator datasheets, model shapes from their published config.json, the drafters' shapes,
the software stacks, and the published speedups the projection is checked against.

Nothing here is measured by the lab; ``gpu_projection`` turns it into round costs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .full_size import KIMI_K2, KIMI_K2_LAYERS, KIMI_K2_ROUTED_EXPERTS, QWEN35_27B, QWEN35_27B_LAYERS


@dataclass(frozen=True)
class Accelerator:
    """bandwidth: bytes/s of device memory; bf16_flops: dense bf16 tensor peak (no sparsity)."""
    name: str
    bandwidth: float
    bf16_flops: float
    memory_gb: float
    source: str


ACCELERATORS = {
    "h100-sxm": Accelerator("H100 SXM", 3.35e12, 989.4e12, 80,
                            "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: 3.35 TB/s; BF16 Tensor "
                            "Core 1,979 TFLOPS with sparsity, half of it dense)"),
    "h200": Accelerator("H200", 4.8e12, 989.4e12, 141,
                        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: 141 GB, 4.8 TB/s; BF16 Tensor "
                        "Core 1,979 TFLOPS with sparsity, half of it dense)"),
    "b200": Accelerator("B200", 8.0e12, 2250e12, 180,
                        "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: 8 TB/s per GPU; FP16/BF16 "
                        "4.5 PFLOPS per GPU with sparsity, 2.25 dense)"),
    "rtx4090": Accelerator("RTX 4090", 1.008e12, 165.2e12, 24,
                           "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf "
                           "(appendix A: 1008 GB/s; peak BF16 Tensor TFLOPS with FP32 accumulate 165.2, dense)"),
}


@dataclass(frozen=True)
class ModelShape:
    """A target's per-layer shapes (config.json) and weight bytes per parameter.

    attention: "gqa" (Qwen3), "gated" (Qwen3.5/3.6 full attention: q and its output gate), or
    "mla" (DeepSeek-V3 / Kimi); gdn_layers of the layers are Gated DeltaNet (the rest attention);
    dense_layers carry a dense MLP of ``mlp_width``, the others ``experts`` routed experts of
    ``expert_width`` (top ``top_k``) plus ``shared_experts``. bytes_per_param: the dense
    weights; expert_bytes_per_param: the routed experts' (Kimi K2.6: INT4)."""
    name: str
    layers: int
    hidden: int
    vocab: int
    attention: str
    heads: int
    kv_heads: int
    head_dim: int
    mlp_width: int
    dense_layers: int
    bytes_per_param: float
    dtype: str
    source: str
    gdn_layers: int = 0
    gdn_key_heads: int = 0
    gdn_value_heads: int = 0
    gdn_head_dim: int = 0
    experts: int = 0
    top_k: int = 0
    expert_width: int = 0
    shared_experts: int = 0
    expert_bytes_per_param: float = 0.0
    q_lora: int = 0
    kv_lora: int = 0
    rope_dim: int = 0
    nope_dim: int = 0
    v_dim: int = 0

    @property
    def attention_layers(self) -> int:
        return self.layers - self.gdn_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    def attention_params(self) -> int:
        h = self.hidden
        if self.attention == "mla":
            q_out = self.heads * (self.nope_dim + self.rope_dim)
            q = h * self.q_lora + self.q_lora * q_out if self.q_lora else h * q_out  # q_lora_rank None: one q_proj
            return (q
                    + h * (self.kv_lora + self.rope_dim) + self.kv_lora * self.heads * (self.nope_dim + self.v_dim)
                    + self.heads * self.v_dim * h)
        q = self.heads * self.head_dim * (2 if self.attention == "gated" else 1)
        return h * q + 2 * h * self.kv_heads * self.head_dim + self.heads * self.head_dim * h

    def gdn_params(self) -> int:
        d, kh, vh = self.gdn_head_dim, self.gdn_key_heads, self.gdn_value_heads
        return self.hidden * (2 * kh * d + 2 * vh * d) + self.hidden * 2 * vh + vh * d * self.hidden

    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden * self.expert_width

    def dense_params(self) -> int:
        """Every weight a forward reads whatever the routing: attention / GDN, dense MLPs, shared
        experts and routers, the LM head (the embedding reads one row a token: left out)."""
        moe = self.moe_layers * (self.shared_experts * self.expert_params() + self.hidden * self.experts)
        return (self.attention_layers * self.attention_params() + self.gdn_layers * self.gdn_params()
                + self.dense_layers * 3 * self.hidden * self.mlp_width + moe + self.vocab * self.hidden)

    def total_params(self) -> int:
        return self.dense_params() + self.moe_layers * self.experts * self.expert_params() + self.vocab * self.hidden

    def active_params(self) -> int:
        """Parameters one token multiplies: the dense ones and its top-k experts per MoE layer."""
        return self.dense_params() + self.moe_layers * self.top_k * self.expert_params()

    def kv_bytes_per_token(self) -> float:
        """Cache bytes one context token adds over all attention layers (bf16)."""
        per_layer = (self.kv_lora + self.rope_dim) if self.attention == "mla" else 2 * self.kv_heads * self.head_dim
        return 2.0 * per_layer * self.attention_layers

    def gdn_state_elems(self) -> int:
        """Recurrent state elements of one GDN layer (value heads x dk x dv)."""
        return self.gdn_value_heads * self.gdn_head_dim * self.gdn_head_dim


QWEN3_8B = ModelShape(
    "Qwen3-8B", layers=36, hidden=4096, vocab=151936, attention="gqa", heads=32, kv_heads=8, head_dim=128,
    mlp_width=12288, dense_layers=36, bytes_per_param=2.0, dtype="bf16",
    source="https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json (num_hidden_layers 36, hidden_size 4096, "
           "num_attention_heads 32, num_key_value_heads 8, head_dim 128, intermediate_size 12288, vocab_size 151936, "
           "tie_word_embeddings false, torch_dtype bfloat16)")

QWEN3_CODER_30B = ModelShape(
    "Qwen3-Coder-30B-A3B", layers=48, hidden=2048, vocab=151936, attention="gqa", heads=32, kv_heads=4, head_dim=128,
    mlp_width=0, dense_layers=0, bytes_per_param=2.0, dtype="bf16", experts=128, top_k=8, expert_width=768,
    shared_experts=0, expert_bytes_per_param=2.0,
    source="https://huggingface.co/Qwen/Qwen3-Coder-30B-A3B-Instruct/blob/main/config.json (num_hidden_layers 48, "
           "hidden_size 2048, num_attention_heads 32, num_key_value_heads 4, head_dim 128, num_experts 128, "
           "num_experts_per_tok 8, moe_intermediate_size 768, no shared expert, vocab_size 151936, bfloat16)")

QWEN36_27B = ModelShape(
    "Qwen3.6-27B", layers=QWEN35_27B_LAYERS, hidden=QWEN35_27B["hidden_size"], vocab=248320, attention="gated",
    heads=QWEN35_27B["num_attention_heads"], kv_heads=QWEN35_27B["num_key_value_heads"],
    head_dim=QWEN35_27B["head_dim"], mlp_width=QWEN35_27B["intermediate_size"], dense_layers=QWEN35_27B_LAYERS,
    bytes_per_param=2.0, dtype="bf16", gdn_layers=48, gdn_key_heads=QWEN35_27B["linear_num_key_heads"],
    gdn_value_heads=QWEN35_27B["linear_num_value_heads"], gdn_head_dim=QWEN35_27B["linear_key_head_dim"],
    source="https://huggingface.co/Qwen/Qwen3.5-27B/blob/main/config.json, text_config (Qwen3.6-27B publishes the "
           "same text stack): 64 layers, 48 Gated DeltaNet (16 key / 48 value heads of 128) + 16 gated attention "
           "(24 / 4 heads of 256), hidden 5120, intermediate 17408, vocab_size 248320, bfloat16")

# lucebox runs the GGUF Q4_K_M file: its bytes per parameter from the published file size
QWEN36_27B_Q4KM_BYTES = 16.8e9   # "Qwen3.6-27B-Q4_K_M.gguf, ~16.8 GB" (lucebox-hub dflash results, Luce-Org/lucebox-hub at 8cf241c)
QWEN36_27B_Q4KM = replace(QWEN36_27B, dtype="Q4_K_M", bytes_per_param=QWEN36_27B_Q4KM_BYTES / QWEN36_27B.total_params())

KIMI_K26 = ModelShape(
    "Kimi K2.6", layers=KIMI_K2_LAYERS, hidden=KIMI_K2["hidden_size"], vocab=163840, attention="mla",
    heads=KIMI_K2["num_attention_heads"], kv_heads=KIMI_K2["num_key_value_heads"], head_dim=0,
    mlp_width=KIMI_K2["intermediate_size"], dense_layers=KIMI_K2["first_k_dense_replace"], bytes_per_param=2.0,
    dtype="bf16, routed experts INT4 (group 32)", experts=KIMI_K2_ROUTED_EXPERTS, top_k=KIMI_K2["num_experts_per_tok"],
    expert_width=KIMI_K2["moe_intermediate_size"], shared_experts=KIMI_K2["n_shared_experts"],
    expert_bytes_per_param=0.5 + 2.0 / 32, q_lora=KIMI_K2["q_lora_rank"], kv_lora=KIMI_K2["kv_lora_rank"],
    rope_dim=KIMI_K2["qk_rope_head_dim"], nope_dim=KIMI_K2["qk_nope_head_dim"], v_dim=KIMI_K2["v_head_dim"],
    source="https://huggingface.co/moonshotai/Kimi-K2.6/blob/main/config.json (the Kimi K2 text stack, "
           "full_size.KIMI_K2: 61 layers, first dense, 384 routed experts top-8 of width 2048, one shared, MLA; "
           "vocab_size 163840); quantization_config: routed experts INT4, group size 32 (a bf16 scale per 32 "
           "weights), every other weight bf16 (also https://unsloth.ai/docs/models/tutorials/kimi-k2.6)")

TARGETS = {"Qwen3-8B": QWEN3_8B, "Qwen3-Coder-30B-A3B": QWEN3_CODER_30B, "Qwen3.6-27B": QWEN36_27B,
           "Qwen3.6-27B Q4_K_M": QWEN36_27B_Q4KM, "Kimi K2.6": KIMI_K26}


@dataclass(frozen=True)
class DrafterShape:
    """A DFlash drafter: ``layers`` dense decoder layers (gqa) of ``hidden`` that read the fused
    features of ``features`` target layers and the target's own LM head; block: tokens drafted.
    file_bytes: the published file's size when a quantized file is run (else params x bytes)."""
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_width: int
    features: int
    block: int
    bytes_per_param: float
    source: str
    file_bytes: float = 0.0

    def params(self) -> int:
        h = self.hidden
        layer = h * self.heads * self.head_dim * 2 + 2 * h * self.kv_heads * self.head_dim + 3 * h * self.mlp_width
        return self.layers * layer + self.features * h * h

    def weight_bytes(self) -> float:
        return self.file_bytes or self.params() * self.bytes_per_param


DRAFTERS = {
    "Qwen3-8B": DrafterShape("Qwen3-8B-DFlash-b16", 5, 4096, 32, 8, 128, 12288, 5, 16, 2.0,
                             "https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16 (5 Qwen3 layers of the target's width: "
                             "z-lab/dflash issue 11, 'currently 5'; block 16)"),
    "Qwen3-Coder-30B-A3B": DrafterShape("Qwen3-Coder-30B-A3B-DFlash", 5, 2048, 32, 4, 128, 6144, 5, 16, 2.0,
                                        "https://huggingface.co/z-lab/Qwen3-Coder-30B-A3B-DFlash (assumed: 5 dense "
                                        "layers of the target's width, as the Qwen3-8B drafter; block 16)"),
    "Qwen3.6-27B": DrafterShape("Qwen3.6-27B-DFlash", 5, 5120, 32, 8, 128, 17408, 5, 16, 2.0,
                                "https://huggingface.co/z-lab/Qwen3.6-27B-DFlash (5 layers, hidden 5120, 32 / 8 heads "
                                "of 128, intermediate 17408, 5 target layers; a published copy of the config: "
                                "https://huggingface.co/HyzeAI/Hyze1B/blob/main/config.json)"),
    "Kimi K2.6": DrafterShape("Kimi-K2.5-DFlash", 6, 7168, 64, 8, 128, 18432, 6, 8, 2.0,
                              "https://huggingface.co/freakyskittle/kimi-k2.5-dflash.gguf (a conversion of "
                              "z-lab/Kimi-K2.5-DFlash: 6 layers, hidden 7168, 64 / 8 heads, intermediate 18432); "
                              "block 8: https://huggingface.co/z-lab/Kimi-K2.5-DFlash (model card, block_size 8; "
                              "K2.6 shares K2.5's architecture)"),
}
DRAFTERS["Qwen3.6-27B Q4_K_M"] = replace(DRAFTERS["Qwen3.6-27B"], file_bytes=1.8e9, source="dflash-draft-3.6-q8_0.gguf, "
                                         "1.8 GB (lucebox-hub dflash results, RTX 4090 section)")
DRAFTERS["Qwen3.5-27B Q4_K_M"] = replace(DRAFTERS["Qwen3.6-27B"], file_bytes=0.986e9, source="dflash-draft-q4_k_m.gguf, "
                                         "986 MB (lucebox-hub dflash results, RTX 4090 section)")


@dataclass(frozen=True)
class Stack:
    """A software stack: where its fixed cost sits (``overhead``: "layer", seconds per layer of
    every forward, kernel launches of an eager framework; "round", seconds per speculative
    round, host-side tree and cache work; "none"), the bytes per element of the GDN states
    it keeps per tree node, and its one calibration point (``PUBLISHED`` index, None: nothing fitted)."""
    name: str
    description: str
    overhead: str
    gdn_state_bytes: int
    calibration: int | None
    source: str


@dataclass(frozen=True)
class Published:
    """One published point: speedup over AR at T = 0 on HumanEval. budget None: the best of the
    paper's grid (16 .. 1024, not named per point); method "dflash": the block-16 chain."""
    model: str
    drafter: str
    accelerator: str
    gpus: int
    stack: str
    method: str
    budget: int | None
    tau: float
    speedup: float
    source: str


DDTREE_PAPER = ("arXiv 2604.12989 (DDTree), figure 1 and https://liranringel.github.io/ddtree/ (T = 0, "
                "HumanEval, H200, best budget per dataset)")
LUCEBOX = ("lucebox-hub (github.com/Luce-Org/lucebox-hub, commit 8cf241c6a7d9), its published dflash results "
           "(RTX 4090 section: HumanEval, n_gen 256, budget sweep; speedup = tok/s over the AR tok/s)")
_LUCE35 = {22: (7.45, 122.95), 26: (7.60, 123.68), 28: (7.77, 125.37), 30: (7.62, 123.12), 34: (7.28, 111.76)}
_LUCE36 = {22: (4.85, 79.65), 26: (5.00, 82.37), 28: (4.99, 82.46), 30: (5.06, 79.82), 34: (5.17, 83.00),
           35: (5.20, 83.12), 36: (5.32, 84.55), 37: (5.32, 84.30), 38: (5.32, 82.80)}
LUCE_AR = {"Qwen3.5-27B": 32.20, "Qwen3.6-27B": 33.74}   # AR tok/s of each sweep

PUBLISHED = (
    Published("Qwen3-Coder-30B-A3B", "Qwen3-Coder-30B-A3B", "h200", 1, "transformers-eager", "dflash", 15, 8.02,
              6.09, DDTREE_PAPER),
    Published("Qwen3-Coder-30B-A3B", "Qwen3-Coder-30B-A3B", "h200", 1, "transformers-eager", "ddtree", None, 10.72,
              8.22, DDTREE_PAPER),
    Published("Qwen3-8B", "Qwen3-8B", "h200", 1, "transformers-eager", "dflash", 15, 6.61, 4.84, DDTREE_PAPER),
    Published("Qwen3-8B", "Qwen3-8B", "h200", 1, "transformers-eager", "ddtree", None, 9.67, 6.90, DDTREE_PAPER),
) + tuple(Published("Qwen3.5-27B", "Qwen3.5-27B Q4_K_M", "rtx4090", 1, "lucebox", "ddtree", b, al,
                    round(tps / LUCE_AR["Qwen3.5-27B"], 3), LUCEBOX) for b, (al, tps) in _LUCE35.items()) \
  + tuple(Published("Qwen3.6-27B", "Qwen3.6-27B Q4_K_M", "rtx4090", 1, "lucebox", "ddtree", b, al,
                    round(tps / LUCE_AR["Qwen3.6-27B"], 3), LUCEBOX) for b, (al, tps) in _LUCE36.items())

STACKS = {
    "transformers-eager": Stack("transformers-eager", "the DDTree paper's benchmark: transformers, PyTorch eager, bf16, "
                                "sdpa (liranringel/ddtree benchmark.py)", "layer", 2, 0,
                                "https://github.com/liranringel/ddtree (benchmark.py)"),
    "lucebox": Stack("lucebox", "lucebox-hub dflash: ggml / CUDA, GGUF Q4_K_M, DDTree with f16 GDN intermediates",
                     "round", 2, 6, LUCEBOX),
    "kernel-floor": Stack("kernel-floor", "no fixed cost: the datasheet floor at the stated efficiencies (what an "
                          "engine with fused kernels and CUDA graphs approaches); nothing fitted", "none", 2, None,
                          "this module's stated efficiencies"),
}

# The chain's acceptance length (DFlash, the published drafter's block) a projection calibrates its
# per-depth acceptance model to (``acceptance_model``), for targets without a published tree point.
KIMI_CARD = ("https://huggingface.co/z-lab/Kimi-K2.5-DFlash (model card: block 8, acceptance length HumanEval 5.3, "
             "GSM8K 5.3, MBPP 4.5, MT-Bench 3.7; as quoted in the lab's research notes and issue 69; the card not in the lab's search corpus)")
KIMI_CARD_TAU = {"HumanEval": 5.3, "GSM8K": 5.3, "MBPP": 4.5, "MT-Bench": 3.7}
CHAIN_TAU = {"Kimi K2.6": (KIMI_CARD_TAU["HumanEval"], f"HumanEval {KIMI_CARD_TAU['HumanEval']}: {KIMI_CARD}")}
# The band the bounds span (issue 69 item 3): each end with where it comes from.
KIMI_TAU_BAND = {
    3.6: "the seed's '3.6-4.9 with linear (block_size=8)' (the seed question's own figure); SGLang PR 35784 "
         "reports 3.56 at block 8 (as quoted in issue 69)",
    5.3: f"HumanEval: {KIMI_CARD}",
    5.5: "the upper end of the band issue 69 states (3.6-5.5); not found in the lab's search corpus",
}


def target_of(point: Published) -> ModelShape:
    """The shape a published point ran (lucebox: the Q4_K_M file; Qwen3.5-27B: the 3.6 text stack)."""
    return QWEN36_27B_Q4KM if point.stack == "lucebox" else TARGETS[point.model]


def drafter_of(point: Published) -> DrafterShape:
    return DRAFTERS[point.drafter]
