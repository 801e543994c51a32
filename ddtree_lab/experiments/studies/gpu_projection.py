"""What a DDTree round costs on named accelerators, projected from public shapes, and the seed's
question answered with its assumptions in the open (issue 61, items 2-4). A PROJECTION: nothing
here ran on a GPU; ``scripts/gpu_projection_check.py`` measures a verify on the first lent one.

A forward over ``tokens`` rows (roofline, as in the DFlash paper's cost discussion, arXiv
2602.06036 section 2, and EVICT's verification cost, arXiv 2605.00342 section 3):

    bytes   = dense weights (every non-expert weight + the LM head, once)
              + per MoE layer the union U(tokens) of routed experts x one expert's bytes
              + the KV cache of ``CONTEXT`` tokens + the GDN states (read once)
              + (tokens x GDN layers x the state) kept per tree node (fork / WY extra state)
    flops   = tokens x (2 x active params + the attention over the context)
    seconds = max(bytes / (ETA_BANDWIDTH x bandwidth), flops / (ETA_COMPUTE x bf16 peak)) [+ overhead]

A round = the drafter's forward (its weights, the target's LM head, 2 x block rows) + the
verify of 1 + budget rows [+ the stack's overhead]; the AR step = a forward of one row;
speedup = tau x AR step / round. The efficiencies are stated, not fitted. The one fitted
number per software stack is its overhead (``gpu_specs.Stack``: per layer of every forward
for an eager framework, per round for lucebox), fitted on exactly ONE published point
(``Stack.calibration``); every other published point is a prediction, shown with its error.

U(tokens): independent routing, n (1 - (1 - k/n)^tokens), or a correlated routing carried to n, k
through the union model on the round's tree (``expert_union.effective_tokens``): the routing
fitted to published unions of real MoEs (``published_unions``, ``routing_fit.json``) and, for the
bounds, the pairs measured on the lab's toy (``k26_bounds``).

tau(B): a published tau where the point has one; else the per-depth acceptance model
(``acceptance_model``) calibrated to a published chain tau at the drafter's block, its sibling
shape fitted on the lab's measured trees (``tau_source`` says which, per row). The model's best
tree is also the tree whose expert union a round loads.

A stack's fixed cost per forward (``Setting.fixed_s``: launches, tensor-parallel collectives)
is added to every forward, the drafter's and the target's: the seed's main unknown, which
``k26_bounds`` spans and ``scripts/gpu_check.sh`` measures on a lent GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from ...common import RESULTS_DIR
from . import acceptance_model as am
from . import expert_union as eu
from . import published_unions as pu
from .gpu_specs import (ACCELERATORS, CHAIN_TAU, DRAFTERS, PUBLISHED, STACKS, TARGETS, Accelerator, DrafterShape,
                        ModelShape, Published, Stack, drafter_of, target_of)

ETA_BANDWIDTH = 0.8   # stated: the share of datasheet bandwidth a weight-streaming kernel reaches
ETA_COMPUTE = 0.6     # stated: the share of the dense bf16 peak a GEMM of these shapes reaches
CONTEXT = 1024        # stated: context tokens a verify attends to (a HumanEval prompt and its answer)
BUDGETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
PAPER_BUDGETS = (16, 32, 64, 128, 256, 512, 1024)   # the DDTree paper's grid (benchmark.py)
PROJECTION_CSV = "gpu_projection.csv"


@dataclass(frozen=True)
class Setting:
    """One target + drafter on ``gpus`` x ``acc`` under ``stack`` with its fitted overhead (s);
    fixed_s: seconds every forward adds (the drafter's and the target's), e.g. collectives."""
    model: ModelShape
    drafter: DrafterShape
    acc: Accelerator
    gpus: int
    stack: Stack
    overhead_s: float = 0.0
    fixed_s: float = 0.0


@dataclass(frozen=True)
class Routing:
    """How rows pick experts: rho_path, rho_sibling of the union model (0, 0: independent)."""
    name: str
    rho_path: float
    rho_sibling: float


INDEPENDENT = Routing("independent", 0.0, 0.0)


# ----------------------------------------------------------------------------- one forward

def roofline_seconds(bytes_, flops, s: Setting):
    """max(bytes / effective bandwidth, flops / effective peak) over ``s.gpus`` devices."""
    bw = ETA_BANDWIDTH * s.acc.bandwidth * s.gpus
    peak = ETA_COMPUTE * s.acc.bf16_flops * s.gpus
    return np.maximum(np.asarray(bytes_, dtype=float) / bw, np.asarray(flops, dtype=float) / peak)


def target_bytes(m: ModelShape, tokens, union, gdn_state_bytes: int, context: int = CONTEXT):
    """Bytes a forward over ``tokens`` rows reads and keeps (``union``: experts per MoE layer)."""
    tokens, union = np.asarray(tokens, dtype=float), np.asarray(union, dtype=float)
    weights = m.dense_params() * m.bytes_per_param + m.moe_layers * union * m.expert_params() * m.expert_bytes_per_param
    states = context * m.kv_bytes_per_token() + m.gdn_layers * m.gdn_state_elems() * 4.0
    fork = np.where(tokens > 1, tokens * m.gdn_layers * m.gdn_state_elems() * gdn_state_bytes, 0.0)
    return weights + states + fork


def target_flops(m: ModelShape, tokens, context: int = CONTEXT):
    """FLOPs of a forward over ``tokens`` rows: 2 x active params + attention over ``context``."""
    qk = m.heads * ((m.nope_dim + m.rope_dim + m.v_dim) if m.attention == "mla" else 2 * m.head_dim)
    return np.asarray(tokens, dtype=float) * (2.0 * m.active_params() + 2.0 * context * qk * m.attention_layers)


def forward_seconds(s: Setting, tokens, union, context: int = CONTEXT):
    """Seconds of one target forward over ``tokens`` rows (+ the stack's per-layer overhead)."""
    t = roofline_seconds(target_bytes(s.model, tokens, union, s.stack.gdn_state_bytes, context),
                         target_flops(s.model, tokens, context), s)
    return t + (s.overhead_s * s.model.layers if s.stack.overhead == "layer" else 0.0) + s.fixed_s


def draft_seconds(s: Setting) -> float:
    """The drafter's forward: its weights and the target's LM head read once; 2 x block rows."""
    d, m = s.drafter, s.model
    head = m.vocab * m.hidden
    bytes_ = d.weight_bytes() + head * m.bytes_per_param
    flops = 2.0 * d.params() * 2 * d.block + 2.0 * head * (d.block - 1)
    t = float(roofline_seconds(bytes_, flops, s))
    return t + (s.overhead_s * (d.layers + 1) if s.stack.overhead == "layer" else 0.0) + s.fixed_s


def ar_seconds(s: Setting) -> float:
    """One AR step: a forward of one row (its top-k experts per MoE layer)."""
    return float(forward_seconds(s, 1, s.model.top_k))


def round_seconds(s: Setting, tokens, union):
    """Draft + verify of ``tokens`` rows (+ the stack's per-round overhead)."""
    return draft_seconds(s) + forward_seconds(s, tokens, union) + (s.overhead_s if s.stack.overhead == "round" else 0.0)


def mla_shape(config, bytes_per_param: float, name: str = "measured model") -> ModelShape:
    """The ``ModelShape`` of a ``DeepseekV3Config`` (the few full-width layers a GPU check times)."""
    c = config
    dense = c.first_k_dense_replace if c.n_routed_experts else c.num_hidden_layers
    return ModelShape(name, layers=c.num_hidden_layers, hidden=c.hidden_size, vocab=c.vocab_size, attention="mla",
                      heads=c.num_attention_heads, kv_heads=c.num_key_value_heads, head_dim=0,
                      mlp_width=c.intermediate_size, dense_layers=dense, bytes_per_param=bytes_per_param,
                      dtype="measured", source="the model's own config", experts=c.n_routed_experts,
                      top_k=c.num_experts_per_tok, expert_width=c.moe_intermediate_size,
                      shared_experts=c.n_shared_experts, expert_bytes_per_param=bytes_per_param, q_lora=c.q_lora_rank or 0,
                      kv_lora=c.kv_lora_rank, rope_dim=c.qk_rope_head_dim, nope_dim=c.qk_nope_head_dim,
                      v_dim=c.v_head_dim)


# ----------------------------------------------------------------------------- expert unions

def chain_union(m: ModelShape, tokens: int, r: Routing) -> float:
    """Experts per MoE layer of a chain of ``tokens`` rows (0 on a dense target)."""
    if not m.experts:
        return 0.0
    t_eff = eu.effective_tokens(eu.chain_parents(tokens), r.rho_path, 0.0)[-1]
    return float(eu.expected_union(m.experts, m.top_k, t_eff))


def tree_union(m: ModelShape, parents: list, r: Routing) -> np.ndarray:
    """[N + 1]: experts per MoE layer of every prefix (1 .. N + 1 rows, root first) of a tree
    in pop order (``parents``); zeros on a dense target."""
    if not m.experts:
        return np.zeros(len(parents))
    return eu.expected_union(m.experts, m.top_k, eu.effective_tokens(parents, r.rho_path, r.rho_sibling))


# ----------------------------------------------------------------------------- tau(B)

def model_curve(chain_tau: float, shape: am.Shape, block: int, nodes: int) -> am.ModelTree:
    """The acceptance model's best tree of ``nodes`` nodes for a chain of ``chain_tau`` at ``block``."""
    return am.model_tree(am.chain_acceptance(chain_tau, block - 1), shape, block - 1, nodes)


def chain_for_tree(tree_tau: float, shape: am.Shape, block: int, budget: int) -> float:
    """The chain tau at which the model's tau(budget) equals ``tree_tau`` (bisection)."""
    lo, hi = 1.0 + 1e-9, float(block) - 1e-9
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(am.tree_tau(mid, shape, block - 1, [budget])[0]) < tree_tau else (lo, mid)
    return (lo + hi) / 2


# ----------------------------------------------------------------------------- published points

def predict(point: Published, s: Setting, r: Routing, shape: am.Shape) -> dict:
    """A published point's predicted speedup (and, for a best-budget point, the predicted best
    budget of the paper's grid and its tau: the acceptance model at the same target's published
    chain tau)."""
    m, ar = s.model, ar_seconds(s)
    if point.method == "dflash":
        tokens = s.drafter.block
        t = round_seconds(s, tokens, chain_union(m, tokens, r))
        return {"budget": point.budget, "tau": point.tau, "tau_source": "published", "speedup": point.tau * ar / float(t)}
    if point.budget is not None:   # the model's tree at the chain tau that gives the published tau (its union)
        union = 0.0 if not m.experts else tree_union(m, model_curve(
            chain_for_tree(point.tau, shape, s.drafter.block, point.budget), shape, s.drafter.block,
            point.budget).parents, r)[point.budget]
        t = float(round_seconds(s, point.budget + 1, union))
        return {"budget": point.budget, "tau": point.tau, "tau_source": "published", "speedup": point.tau * ar / t}
    chain = next(p for p in PUBLISHED if p.model == point.model and p.method == "dflash")
    tree = model_curve(chain.tau, shape, s.drafter.block, max(PAPER_BUDGETS))
    union = tree_union(m, tree.parents, r)
    budgets = np.array(PAPER_BUDGETS)
    taus = tree.tau[budgets - 1]
    speedups = taus * ar / round_seconds(s, budgets + 1, union[budgets])
    best = int(np.argmax(speedups))
    return {"budget": int(budgets[best]), "tau": float(taus[best]),
            "tau_source": "acceptance model at the published DFlash tau", "speedup": float(speedups[best])}


def cost_only(point: Published, s: Setting, r: Routing, shape: am.Shape, budget: int = am.PAPER_FIT_BUDGET) -> float:
    """A best-budget tree point's speedup with its published tau put in (the cost model alone):
    a round of ``budget`` nodes (the paper's speedup peaks at 256-512)."""
    chain = next(p for p in PUBLISHED if p.model == point.model and p.method == "dflash")
    tree = model_curve(chain.tau, shape, s.drafter.block, budget)
    t = float(round_seconds(s, budget + 1, tree_union(s.model, tree.parents, r)[budget]))
    return point.tau * ar_seconds(s) / t


def setting_of(point: Published, stack: Stack, overhead_s: float) -> Setting:
    return Setting(target_of(point), drafter_of(point), ACCELERATORS[point.accelerator], point.gpus, stack, overhead_s)


def calibrate(stack: Stack, r: Routing, shape: am.Shape) -> float:
    """The stack's overhead (s) at which its calibration point's predicted speedup equals the
    published one: bisection on a bracket where the error changes sign (0 when the point needs
    none, ``math.nan`` when no overhead in [0, 1 s] reaches it)."""
    if stack.calibration is None:
        return 0.0
    point = PUBLISHED[stack.calibration]

    def error(x):
        return predict(point, setting_of(point, stack, x), r, shape)["speedup"] - point.speedup
    grid = [0.0] + list(np.geomspace(1e-7, 1.0, 71))
    errs = [error(x) for x in grid]
    hit = next((i for i in range(len(grid) - 1) if errs[i] == 0 or errs[i] * errs[i + 1] < 0), None)
    if hit is None:
        return math.nan
    lo, hi = grid[hit], grid[hit + 1]
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if error(mid) * errs[hit] > 0 else (lo, mid)
    return (lo + hi) / 2


def routing_for(m: ModelShape, fitted: Routing) -> list[Routing]:
    """The two bounds of a MoE target (independent, fitted to published unions), or one row for
    a dense target."""
    if not m.experts:
        return [Routing("dense", 0.0, 0.0)]
    return [INDEPENDENT, fitted]


def published_rows(overheads: dict, fitted: Routing, shape: am.Shape) -> list[dict]:
    """One row per published point: predicted (fitted routing on MoE) vs published speedup;
    ``calibration`` True on each stack's fitted point."""
    rows = []
    for i, point in enumerate(PUBLISHED):
        stack = STACKS[point.stack]
        s = setting_of(point, stack, overheads[stack.name])
        r = routing_for(s.model, fitted)[-1]
        p = predict(point, s, r, shape)
        rows.append({"model": point.model, "accelerator": point.accelerator, "gpus": point.gpus, "stack": stack.name,
                     "routing": r.name, "method": point.method, "budget": p["budget"], "tau": p["tau"],
                     "block_size": s.drafter.block, "tau_source": p["tau_source"], "published_tau": point.tau,
                     "predicted_speedup": p["speedup"], "published_speedup": point.speedup,
                     "error": p["speedup"] / point.speedup - 1, "calibration": stack.calibration == i,
                     "source": point.source})
    return rows


# ----------------------------------------------------------------------------- projections

@dataclass(frozen=True)
class Projection:
    """A target on an accelerator (``model`` / ``drafter`` keys of ``gpu_specs``) under stacks;
    chain_tau: the published chain tau the lab's shape is scaled to, and its source."""
    model: str
    drafter: str
    accelerator: str
    gpus: int
    stacks: tuple
    chain_tau: float
    tau_source: str


def projections(shape: am.Shape) -> tuple:
    """Kimi K2.6 and Qwen3.6-27B on H200 (the seed's question) and the other pairs."""
    kimi_tau, kimi_src = CHAIN_TAU["Kimi K2.6"]
    luce36 = next(p for p in PUBLISHED if p.model == "Qwen3.6-27B" and p.budget == 36)
    q36 = (chain_for_tree(luce36.tau, shape, DRAFTERS["Qwen3.6-27B"].block, 36),
           "acceptance model at the chain tau that gives lucebox's Qwen3.6-27B AL at budget 36")
    paper = {p.model: (p.tau, "acceptance model at the DDTree paper's DFlash tau") for p in PUBLISHED
             if p.method == "dflash"}
    both = ("transformers-eager", "kernel-floor")
    kimi = (kimi_tau, f"acceptance model at the published chain tau, {kimi_src}")
    return (Projection("Kimi K2.6", "Kimi K2.6", "h200", 8, both, *kimi),
            Projection("Kimi K2.6", "Kimi K2.6", "b200", 8, both, *kimi),
            Projection("Qwen3.6-27B", "Qwen3.6-27B", "h200", 1, both, *q36),
            Projection("Qwen3.6-27B", "Qwen3.6-27B", "b200", 1, both, *q36),
            Projection("Qwen3.6-27B Q4_K_M", "Qwen3.6-27B Q4_K_M", "rtx4090", 1, ("lucebox",), *q36),
            *(Projection(name, name, acc, 1, both, *paper[name]) for name in ("Qwen3-8B", "Qwen3-Coder-30B-A3B")
              for acc in ("h100-sxm", "h200", "b200")))


def curve(s: Setting, r: Routing, chain_tau: float, shape: am.Shape, budgets=BUDGETS) -> pd.DataFrame:
    """AR, the DFlash chain (the drafter's block) and DDTree at ``budgets``: tau (the acceptance
    model's), experts per layer (the union of its best tree's rows), ms, speedup."""
    ar = ar_seconds(s)
    block = s.drafter.block
    b = np.array(budgets)
    tree = model_curve(chain_tau, shape, block, int(b.max()))
    union = tree_union(s.model, tree.parents, r)[b]
    taus = tree.tau[b - 1]
    rounds = round_seconds(s, b + 1, union)
    chain_t = float(round_seconds(s, block, chain_union(s.model, block, r)))
    rows = [{"method": "ar", "budget": 0, "tau": 1.0, "experts_per_layer": float(s.model.top_k), "round_ms": 1e3 * ar,
             "predicted_speedup": 1.0},
            {"method": "dflash", "budget": block - 1, "tau": chain_tau,
             "experts_per_layer": chain_union(s.model, block, r), "round_ms": 1e3 * chain_t,
             "predicted_speedup": chain_tau * ar / chain_t}]
    rows += [{"method": "ddtree", "budget": int(bb), "tau": float(t), "experts_per_layer": float(u),
              "round_ms": 1e3 * float(rt), "predicted_speedup": float(t * ar / rt)}
             for bb, t, u, rt in zip(b, taus, union, rounds)]
    out = pd.DataFrame(rows)
    out["tokens_per_s"] = out["predicted_speedup"] / ar
    out["ar_ms"] = 1e3 * ar
    out["block_size"] = block
    return out


def projection_rows(overheads: dict, fitted: Routing, shape: am.Shape) -> list[dict]:
    """Every projection x stack x routing curve as rows of the stored table."""
    rows = []
    for p in projections(shape):
        for name in p.stacks:
            s = Setting(TARGETS[p.model], DRAFTERS[p.drafter], ACCELERATORS[p.accelerator], p.gpus, STACKS[name],
                        overheads[name])
            for r in routing_for(s.model, fitted):
                c = curve(s, r, p.chain_tau, shape)
                c = c.assign(model=s.model.name, dtype=s.model.dtype, accelerator=p.accelerator, gpus=p.gpus,
                             stack=name, routing=r.name,
                             tau_source=np.where(c.method == "ar", "", p.tau_source),
                             published_speedup=np.nan, error=np.nan, calibration=False,
                             source=f"{s.model.source}; {s.acc.source}; {s.drafter.source}")
                rows += c.to_dict("records")
    return rows


COLUMNS = ["model", "accelerator", "method", "budget", "tau", "predicted_speedup", "published_speedup", "calibration",
           "source", "gpus", "stack", "routing", "block_size", "dtype", "tau_source", "published_tau", "error",
           "experts_per_layer", "round_ms", "ar_ms", "tokens_per_s"]
FITTED = "fitted to published unions"   # the routing name of ``routing_fit.json``'s correlation


@dataclass(frozen=True)
class Inputs:
    """What every projection reads from the lab's stores: the routing fitted to published unions
    ({"path", "sibling"}, ``routing_fit.json``), the toy's directly measured pair rhos, and the
    acceptance model's sibling shape fitted on the lab's trees."""
    rhos: dict
    pair_rhos: dict
    shape: am.Shape

    @property
    def fitted(self) -> Routing:
        return Routing(FITTED, self.rhos["path"], self.rhos["sibling"])

    @property
    def pairs(self) -> Routing:
        return Routing("pairs measured here", self.pair_rhos["path"], self.pair_rhos["sibling"])


def load_inputs(directory=RESULTS_DIR) -> Inputs:
    """The inputs from the files under ``directory``: routing_fit.json, expert_pairs.csv, bench.csv."""
    fit = pu.load_fit(directory)
    pairs = eu.pooled_rho(pd.read_csv(directory / eu.PAIRS_CSV), "pairs")
    return Inputs({"path": fit["rho_path"], "sibling": fit["rho_sibling"]}, pairs,
                  am.shapes(directory)["lab"])


def build(inputs: Inputs) -> tuple[pd.DataFrame, dict]:
    """(the stored projection table, {stack: fitted overhead s})."""
    overheads = {name: calibrate(stack, inputs.fitted, inputs.shape) for name, stack in STACKS.items()}
    rows = published_rows(overheads, inputs.fitted, inputs.shape) + projection_rows(overheads, inputs.fitted,
                                                                                     inputs.shape)
    return pd.DataFrame(rows).reindex(columns=COLUMNS), overheads


# ----------------------------------------------------------------------------- honest validation

VALIDATION_CSV = "projection_validation.csv"


def validation(overheads: dict, inputs: Inputs) -> pd.DataFrame:
    """Per published point, the cost model alone (its published tau put in: ``cost_only`` for a
    best-budget tree point, at budget ``acceptance_model.PAPER_FIT_BUDGET``) beside the trivial
    baseline speedup = tau x c (c = published speedup / tau of the stack's one calibration point).
    verdict: "fitted" (the calibration point), "validated" (the cost model is closer than the
    baseline), else "not validated"; the kernel floor has no published point: "not validated"."""
    rows = []
    for i, point in enumerate(PUBLISHED):
        stack = STACKS[point.stack]
        s = setting_of(point, stack, overheads[stack.name])
        r = routing_for(s.model, inputs.fitted)[-1]
        pred = (cost_only(point, s, r, inputs.shape) if point.method == "ddtree" and point.budget is None
                else predict(point, s, r, inputs.shape)["speedup"])
        cal = PUBLISHED[stack.calibration]
        base = point.tau * cal.speedup / cal.tau
        err, base_err = pred / point.speedup - 1, base / point.speedup - 1
        verdict = ("fitted" if i == stack.calibration else "validated" if abs(err) < abs(base_err)
                   else "not validated")
        rows.append({"model": point.model, "stack": stack.name, "method": point.method,
                     "budget": point.budget if point.budget is not None else am.PAPER_FIT_BUDGET,
                     "published_tau": point.tau, "published_speedup": point.speedup, "cost_only_speedup": pred,
                     "cost_only_error": err, "baseline_speedup": base, "baseline_error": base_err,
                     "verdict": verdict, "source": point.source})
    rows.append({"model": "any", "stack": "kernel-floor", "method": "any", "verdict": "not validated",
                 "source": STACKS["kernel-floor"].description + " (no published point runs it)"})
    return pd.DataFrame(rows)


def setting(model: str, accelerator: str, gpus: int, stack: str, overhead_s: float) -> Setting:
    return Setting(TARGETS[model], DRAFTERS[model], ACCELERATORS[accelerator], gpus, STACKS[stack], overhead_s)


def best_budget_at(s: Setting, rho_scale: float, inputs: Inputs, chain_tau: float) -> dict:
    """The widget's answer: best budget (of ``BUDGETS``) and speedup when the fitted correlation is
    scaled by ``rho_scale`` (0: independent routing, 1: as fitted)."""
    r = Routing("scaled", rho_scale * inputs.rhos["path"], rho_scale * inputs.rhos["sibling"])
    c = curve(s, r, chain_tau, inputs.shape)
    trees_c = c[c.method == "ddtree"].set_index("budget")["predicted_speedup"]
    return {"curve": c, "best_budget": int(trees_c.idxmax()), "best_speedup": float(trees_c.max()),
            "dflash_speedup": float(c[c.method == "dflash"].predicted_speedup.iloc[0])}


def write(table: pd.DataFrame, directory=RESULTS_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    table.to_csv(directory / PROJECTION_CSV, index=False, float_format="%.6g")


def main(argv=None) -> None:
    """``python -m ddtree_lab.experiments.studies.gpu_projection``: build and store the table
    from ``routing_fit.json``, ``expert_pairs.csv`` and ``bench.csv``."""
    inputs = load_inputs()
    table, overheads = build(inputs)
    write(table)
    check = validation(overheads, inputs)
    check.to_csv(RESULTS_DIR / VALIDATION_CSV, index=False, float_format="%.6g")
    print(check.drop(columns="source").to_string(index=False))
    print({k: f"{v * 1e3:.4f} ms" for k, v in overheads.items()})
    pub = table[table.published_speedup.notna()]
    print(pub[["model", "stack", "method", "budget", "tau", "predicted_speedup", "published_speedup", "error",
               "calibration"]].to_string(index=False))


if __name__ == "__main__":
    main()
