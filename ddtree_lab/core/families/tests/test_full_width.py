"""Every recurrent family at the layer shapes of its public checkpoints, in float32: the one-pass
``tree`` (and ``commit``) of a full-width stock mixer equals the float64 per-node ``fork`` of the
same weights, up to float32 rounding.

The other family tests prove the maths exactly in float64 at tiny widths; this one checks that the
float32 arithmetic of the fast forms stays accurate at real widths (reductions over thousands of
channels, 128-256 wide states, 32-node trees): ONE stock mixer module per case (not a model),
built from its transformers config with the shapes below (the config defaults, which cite these
checkpoints, set explicitly), weights redrawn at unit scale (``_draw``), a random nonzero state,
a random 32-node tree. ``tree`` runs in float32 on the float32 module; the reference is
``families.fork`` on a float64 copy (``copy.deepcopy(m).double()``) from the same (float32-exact)
inputs, under ``harness.float64_harness`` so the stock float32 casts the step goes through (GDN
kernel dtype, the stock RMSNorms and gated norms of Qwen3.5, OLMo-hybrid, Kimi Linear, MiniMax and
Jamba) stay float64. Mamba1's step keeps its
mirrored float32 rounding of A, B and u (``families/mamba1.py``): ~6e-8 relative, far below the
tolerance.

Shapes (hidden D; all at the brief's numbers, none shrunk):
  gdn     Qwen3.5-27B   Qwen3_5GatedDeltaNet    D 4096, 16 key / 32 value heads, dk = dv = 128, conv 4
  gdn     OLMo-Hybrid-7B OlmoHybridGatedDeltaNet D 3840, 30 heads, dk 96, dv 192, conv 4
  kda     Kimi-Linear-48B-A3B KimiLinearDeltaAttention D 2304, 32 heads x 128, conv 4
  mamba2  Nemotron-H    NemotronHMamba2Mixer    D 4096, 128 heads x 64, d_state 128, 8 groups, conv 4
  mamba2  Bamba-9.8B / Granite-4.0-H BambaMixer D 4096, 128 heads x 64, d_state 256, 1 group, conv 4
  short_conv LFM2-2.6B  Lfm2ShortConv           D 2048, L_cache 3
  lightning MiniMax-Text-01 MiniMaxLightningAttention D 6144, 64 heads x 128 (layer 41 of 80)
  mamba1  Jamba-v0.1    JambaMambaMixer         D 4096, d_state 16, d_conv 4, expand 2, dt_rank 256

Slow (``pytest.mark.slow``): the float64 fork re-reads every weight once per node (up to 250M
parameters for MiniMax); ~35 s on one CPU thread in all (MiniMax ~10 s).
"""
import copy
import importlib
import time

import pytest
import torch
import transformers as hf
from helpers import assert_close, assert_same_state, path_to, random_parents
from transformers.initialization import no_init_weights

from ddtree_lab.core import families, harness
from ddtree_lab.core import verify
from ddtree_lab.core.tree import ancestor_mask_from_parents

pytestmark = pytest.mark.slow

N = 32  # tree nodes
# Scale-aware (``assert_close``: max |err| / max(1, max |ref|)) float32 tolerance. float32 eps is
# 1.2e-7; the longest reductions are the projections (D, I up to 8192 terms: a random-walk error
# <~ eps sqrt(8192) ~ 1e-5 relative, eps * 8192 ~ 1e-3 only if every rounding aligned), then the
# state sums over d_state / head dims (<= 256) and over <= 32 path nodes (another sqrt-sized
# factor). 1e-4 covers that with a margin; a correct run shows <= 1e-6 (the float32 plain step
# itself: ~2e-6), while a wrong tree (the same nodes read as a chain) is off by ~1.
TOL = 1e-4


def modeling(name: str):
    """transformers.models.<name>.modeling_<name>, imported on first use (not at collection)."""
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


# ----------------------------------------------------------------------------- the cases

def _config(kind: str):
    """The config of one case with the checkpoint's layer shapes (see the module docstring)."""
    make = {
        "qwen3_5": lambda: hf.Qwen3_5TextConfig(
            hidden_size=4096, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
            linear_value_head_dim=128, linear_conv_kernel_dim=4),
        "olmo_hybrid": lambda: hf.OlmoHybridConfig(
            hidden_size=3840, linear_num_key_heads=30, linear_num_value_heads=30, linear_key_head_dim=96,
            linear_value_head_dim=192, linear_conv_kernel_dim=4),
        "kimi_linear": lambda: hf.KimiLinearConfig(
            hidden_size=2304, linear_num_heads=32, linear_head_dim=128, linear_conv_kernel_dim=4),
        "nemotron_h": lambda: hf.NemotronHConfig(
            hidden_size=4096, mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4),
        "bamba": lambda: hf.BambaConfig(
            hidden_size=4096, mamba_n_heads=128, mamba_d_head=64, mamba_d_state=256, mamba_n_groups=1,
            mamba_d_conv=4, mamba_expand=2),
        "lfm2": lambda: hf.Lfm2Config(hidden_size=2048, conv_L_cache=3),
        "minimax": lambda: hf.MiniMaxConfig(hidden_size=6144, num_attention_heads=64, head_dim=128,
                                            num_hidden_layers=80),
        "jamba": lambda: hf.JambaConfig(hidden_size=4096, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                                        mamba_dt_rank=256),
    }
    return make[kind]()


# id -> (modeling module, mixer class, layer index (a recurrent layer of the default layer_types))
CASES = {
    "gdn-Qwen3_5GatedDeltaNet": ("qwen3_5", "Qwen3_5GatedDeltaNet", 0),
    "gdn-OlmoHybridGatedDeltaNet": ("olmo_hybrid", "OlmoHybridGatedDeltaNet", 0),
    "kda-KimiLinearDeltaAttention": ("kimi_linear", "KimiLinearDeltaAttention", 0),
    "mamba2-NemotronHMamba2Mixer": ("nemotron_h", "NemotronHMamba2Mixer", 0),
    "mamba2-BambaMixer": ("bamba", "BambaMixer", 0),
    "short_conv-Lfm2ShortConv": ("lfm2", "Lfm2ShortConv", 0),
    "lightning-MiniMaxLightningAttention": ("minimax", "MiniMaxLightningAttention", 41),  # decay rate x 0.49
    "mamba1-JambaMambaMixer": ("jamba", "JambaMambaMixer", 0),
}


def _draw(mod: torch.nn.Module, name: str, p: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A unit-scale value for parameter ``name`` of module ``mod`` (shape of p): projections at std
    fan_in**-0.5 (O(1) outputs from O(1) inputs), depthwise convs at std 0.5, slow decays
    (A = e^{A_log} in (0.05, 0.5), dt_bias in (-1, 0.5)), norm weights 1 + 0.2 N(0, 1)."""
    def randn(std=1.0):
        return std * torch.randn(p.shape, generator=gen)

    def uniform(lo, hi):
        return torch.empty(p.shape).uniform_(lo, hi, generator=gen)

    if isinstance(mod, torch.nn.Linear) and name == "weight":
        return randn(mod.in_features ** -0.5)
    if isinstance(mod, torch.nn.Conv1d) and name == "weight":
        return randn(0.5)
    draws = {"bias": lambda: randn(0.1), "A_log": lambda: uniform(0.05, 0.5).log(),
             "dt_bias": lambda: uniform(-1.0, 0.5), "D": randn}
    if name in draws:
        return draws[name]()
    if name == "weight" and "norm" in type(mod).__name__.lower():
        return 1.0 + randn(0.2)
    raise KeyError(f"no draw for {type(mod).__name__}.{name}")


def build(case: str, seed: int = 0) -> tuple[torch.nn.Module, int]:
    """(the float32 stock mixer of ``case``, every parameter redrawn by ``_draw``, eval mode;
    its input width D). The stock init is skipped (``no_init_weights``): some parameters are
    left to the model's ``_init_weights``, and ``_draw`` sets them all anyway."""
    module, cls, layer = CASES[case]
    cfg = _config(module)
    with no_init_weights():
        m = getattr(modeling(module), cls)(cfg, layer)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            for name, p in mod.named_parameters(recurse=False):
                p.copy_(_draw(mod, name, p, gen))
    return m.float().eval(), cfg.hidden_size


def state_shapes(fam_name: str, m) -> dict:
    """{"conv": [C, K] or None, "rec": shape or None} of mixer m's state (the stock cache layout)."""
    conv = getattr(m, "conv1d", None) or getattr(m, "conv", None)
    conv = None if conv is None else (conv.weight.shape[0], conv.weight.shape[-1])
    rec = {"gdn": lambda: (m.num_v_heads, m.head_k_dim, m.head_v_dim),
           "kda": lambda: (m.num_heads, m.head_dim, m.head_dim),
           "mamba2": lambda: (m.num_heads, m.head_dim, m.ssm_state_size),
           "short_conv": lambda: None,
           "lightning": lambda: (m.num_attention_heads, m.head_dim, m.head_dim),
           "mamba1": lambda: (m.intermediate_size, m.ssm_state_size)}[fam_name]()
    return {"conv": conv, "rec": rec}


def random_state(fam_name: str, m, gen: torch.Generator) -> dict:
    """A random nonzero float32 state: conv entries N(0, 1) (pre-conv inputs of unit-scale
    projections), recurrent entries N(0, 0.3^2)."""
    shapes = state_shapes(fam_name, m)
    return {"conv": {} if shapes["conv"] is None else {0: torch.randn(shapes["conv"], generator=gen)},
            "rec": {} if shapes["rec"] is None else {0: 0.3 * torch.randn(shapes["rec"], generator=gen)}}


def _to64(state: dict) -> dict:
    return {part: {i: t.double() for i, t in ts.items()} for part, ts in state.items()}


# ----------------------------------------------------------------------------- the test

@pytest.mark.parametrize("case", list(CASES))
def test_float32_tree_is_float64_fork(case):
    """float32 ``tree`` (outputs [32, D]) and ``commit`` of the path to the deepest node == the
    float64 ``fork`` (its outputs, its state after that node), scale-aware tol ``TOL``."""
    start = time.perf_counter()
    m, D = build(case)
    fam = verify.family_of(m)
    assert fam is not None and families.name_of(fam) == case.split("-")[0]
    gen = torch.Generator().manual_seed(1)
    parents = random_parents(N, gen, window=4)  # branchy and deep: each node's parent among the 4 before it
    anc = ancestor_mask_from_parents(parents)
    deepest = int(anc.sum(1).argmax())
    state = random_state(families.name_of(fam), m, gen)
    h = torch.randn(N, D, generator=gen)  # [N, D] float32
    with torch.no_grad():
        out, record = fam.tree(m, h, state, parents, anc)
        committed = fam.commit(m, record, path_to(parents, deepest))
        m64 = copy.deepcopy(m).double()
        with harness.float64_harness():
            ref, states = families.fork(fam, m64, h.double(), _to64(state), parents)
    assert out.dtype == torch.float32 and ref.dtype == torch.float64
    print(f"{case}: depth {len(path_to(parents, deepest)) - 1}, {time.perf_counter() - start:.1f} s")
    assert_close(f"{case} tree out", ref, out, TOL)
    assert_same_state(f"{case} commit", states[deepest], committed, TOL)
