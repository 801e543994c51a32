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

U(tokens): independent routing, n (1 - (1 - k/n)^tokens), or the union-implied correlation
measured on the lab's MoE target (``expert_union``), carried to n, k through the union model
on the lab's own drafter trees (``expert_union.effective_tokens``). The two bound a projection.

tau(B): a published tau where the point has one; else the lab's measured DDTree tau(B) / DFlash
tau shape (MLA target, block 16, ``lab_tau_shape``) scaled to a published chain tau
(``tau_source`` says which, per row).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from ...common import RESULTS_DIR
from ...core.allocate import allocate_budgets
from ...train.pair import load_pair
from ..plumbing.results import ResultsStore
from ..plumbing.summary import summarize
from . import expert_union as eu
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
    """One target + drafter on ``gpus`` x ``acc`` under ``stack`` with its fitted overhead (s)."""
    model: ModelShape
    drafter: DrafterShape
    acc: Accelerator
    gpus: int
    stack: Stack
    overhead_s: float = 0.0


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
    return t + (s.overhead_s * s.model.layers if s.stack.overhead == "layer" else 0.0)


def draft_seconds(s: Setting) -> float:
    """The drafter's forward: its weights and the target's LM head read once; 2 x block rows."""
    d, m = s.drafter, s.model
    head = m.vocab * m.hidden
    bytes_ = d.weight_bytes() + head * m.bytes_per_param
    flops = 2.0 * d.params() * 2 * d.block + 2.0 * head * (d.block - 1)
    t = float(roofline_seconds(bytes_, flops, s))
    return t + (s.overhead_s * (d.layers + 1) if s.stack.overhead == "layer" else 0.0)


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


def tree_effective_tokens(trees: list, r: Routing, rows: int) -> np.ndarray:
    """[trees, rows]: effective tokens of every prefix of each stored tree (pop order), continued
    past its stored size at the slope of its last quarter (a tree of the paper's 1024 nodes)."""
    out = []
    for parents in trees:
        t = eu.effective_tokens(parents, r.rho_path, r.rho_sibling)
        if len(t) < rows:
            q = max(2, len(t) // 4)
            slope = (t[-1] - t[-q]) / (q - 1)
            t = np.concatenate([t, t[-1] + slope * np.arange(1, rows - len(t) + 1)])
        out.append(t[:rows])
    return np.stack(out)


def tree_union(m: ModelShape, trees: list, r: Routing, rows: int) -> np.ndarray:
    """[trees, rows]: experts per MoE layer of every prefix (1..rows rows) of each tree."""
    if not m.experts:
        return np.zeros((len(trees), rows))
    return eu.expected_union(m.experts, m.top_k, tree_effective_tokens(trees, r, rows))


# ----------------------------------------------------------------------------- tau(B)

def lab_tau_shape(frame: pd.DataFrame) -> dict[int, float]:
    """{budget: DDTree tau / DFlash tau} of the lab's MLA target at block 16, T = 0 (the
    sweeps store's run "05_sweeps", rows of one run: ``summary.summarize``)."""
    s = summarize(frame[(frame.run == "05_sweeps") & (frame.arch == "mla")])
    s = s[(s.temperature == 0) & (s.block_size == 16)]
    chain = float(s[s.method == "dflash"].tau.iloc[0])
    trees = s[(s.method == "ddtree") & (s.budget != "auto")]
    shape = {int(b): float(t) / chain for b, t in zip(trees.budget, trees.tau)}
    return dict(sorted(shape.items()))


def tau_ratio(shape: dict[int, float], budget) -> np.ndarray:
    """The shape at ``budget``: interpolated in log2(budget); past the largest measured budget,
    the straight line of log2(budget) fitted on the budgets >= 32 (an extrapolation)."""
    b = np.asarray(budget, dtype=float)
    xs, ys = np.log2(list(shape)), np.array(list(shape.values()))
    slope, intercept = np.polyfit(xs[xs >= 5], ys[xs >= 5], 1)
    x = np.log2(b)
    return np.where(x > xs[-1], intercept + slope * x, np.interp(x, xs, ys))


def capped_tau(tau, budget, block: int) -> np.ndarray:
    """A scaled tau held to what a round can accept: at most budget + 1 and block tokens."""
    return np.minimum(np.asarray(tau, dtype=float), np.minimum(np.asarray(budget, dtype=float) + 1, block))


# ----------------------------------------------------------------------------- published points

def predict(point: Published, s: Setting, r: Routing, trees: list, shape: dict) -> dict:
    """A published point's predicted speedup (and, for a best-budget point, the predicted best
    budget and its tau: the lab's shape scaled to the same target's published chain tau)."""
    m, ar = s.model, ar_seconds(s)
    if point.method == "dflash":
        tokens = s.drafter.block
        t = round_seconds(s, tokens, chain_union(m, tokens, r))
        return {"budget": point.budget, "tau": point.tau, "tau_source": "published", "speedup": point.tau * ar / float(t)}
    if point.budget is not None:
        union = tree_union(m, trees, r, point.budget + 1)[:, -1].mean()
        t = float(round_seconds(s, point.budget + 1, union))
        return {"budget": point.budget, "tau": point.tau, "tau_source": "published", "speedup": point.tau * ar / t}
    chain = next(p for p in PUBLISHED if p.model == point.model and p.method == "dflash")
    budgets = np.array(PAPER_BUDGETS)
    union = tree_union(m, trees, r, budgets.max() + 1).mean(0)[budgets]
    taus = capped_tau(chain.tau * tau_ratio(shape, budgets), budgets, s.drafter.block)
    speedups = taus * ar / round_seconds(s, budgets + 1, union)
    best = int(np.argmax(speedups))
    return {"budget": int(budgets[best]), "tau": float(taus[best]), "tau_source": "lab shape x published DFlash tau",
            "speedup": float(speedups[best])}


def setting_of(point: Published, stack: Stack, overhead_s: float) -> Setting:
    return Setting(target_of(point), drafter_of(point), ACCELERATORS[point.accelerator], point.gpus, stack, overhead_s)


def calibrate(stack: Stack, r: Routing, trees: list, shape: dict) -> float:
    """The stack's overhead (s) at which its calibration point's predicted speedup equals the
    published one: bisection on a bracket where the error changes sign (0 when the point needs
    none, ``math.nan`` when no overhead in [0, 1 s] reaches it)."""
    if stack.calibration is None:
        return 0.0
    point = PUBLISHED[stack.calibration]

    def error(x):
        return predict(point, setting_of(point, stack, x), r, trees, shape)["speedup"] - point.speedup
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


def routing_for(m: ModelShape, rhos: dict) -> list[Routing]:
    """The two bounds of a MoE target (independent, measured), or one row for a dense target."""
    if not m.experts:
        return [Routing("dense", 0.0, 0.0)]
    return [INDEPENDENT, Routing("measured", rhos["path"], rhos["sibling"])]


def published_rows(overheads: dict, rhos: dict, trees: list, shape: dict) -> list[dict]:
    """One row per published point: predicted (measured routing on MoE) vs published speedup;
    ``calibration`` True on each stack's fitted point."""
    rows = []
    for i, point in enumerate(PUBLISHED):
        stack = STACKS[point.stack]
        s = setting_of(point, stack, overheads[stack.name])
        r = routing_for(s.model, rhos)[-1]
        p = predict(point, s, r, trees, shape)
        rows.append({"model": point.model, "accelerator": point.accelerator, "gpus": point.gpus, "stack": stack.name,
                     "routing": r.name, "method": point.method, "budget": p["budget"], "tau": p["tau"],
                     "tau_source": p["tau_source"], "published_tau": point.tau,
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


def projections(shape: dict) -> tuple:
    """Kimi K2.6 and Qwen3.6-27B on H200 (the seed's question) and the other pairs."""
    kimi_tau, kimi_src = CHAIN_TAU["Kimi K2.6"]
    luce36 = next(p for p in PUBLISHED if p.model == "Qwen3.6-27B" and p.budget == 36)
    q36 = (luce36.tau / float(tau_ratio(shape, 36)), "lab shape scaled to lucebox's Qwen3.6-27B AL at budget 36")
    paper = {p.model: (p.tau, "lab shape x the DDTree paper's DFlash tau") for p in PUBLISHED if p.method == "dflash"}
    both = ("transformers-eager", "kernel-floor")
    return (Projection("Kimi K2.6", "Kimi K2.6", "h200", 8, both, kimi_tau, f"lab shape x {kimi_src}"),
            Projection("Kimi K2.6", "Kimi K2.6", "b200", 8, both, kimi_tau, f"lab shape x {kimi_src}"),
            Projection("Qwen3.6-27B", "Qwen3.6-27B", "h200", 1, both, *q36),
            Projection("Qwen3.6-27B", "Qwen3.6-27B", "b200", 1, both, *q36),
            Projection("Qwen3.6-27B Q4_K_M", "Qwen3.6-27B Q4_K_M", "rtx4090", 1, ("lucebox",), *q36),
            *(Projection(name, name, acc, 1, both, *paper[name]) for name in ("Qwen3-8B", "Qwen3-Coder-30B-A3B")
              for acc in ("h100-sxm", "h200", "b200")))


def curve(s: Setting, r: Routing, trees: list, chain_tau: float, shape: dict, budgets=BUDGETS) -> pd.DataFrame:
    """AR, the DFlash chain (block 16) and DDTree at ``budgets``: tau, experts per layer, ms, speedup."""
    ar = ar_seconds(s)
    block = s.drafter.block
    b = np.array(budgets)
    union = tree_union(s.model, trees, r, b.max() + 1).mean(0)[b]
    taus = capped_tau(chain_tau * tau_ratio(shape, b), b, block)
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
    return out


def projection_rows(overheads: dict, rhos: dict, trees: list, shape: dict) -> list[dict]:
    """Every projection x stack x routing curve as rows of the stored table."""
    rows = []
    for p in projections(shape):
        for name in p.stacks:
            s = Setting(TARGETS[p.model], DRAFTERS[p.drafter], ACCELERATORS[p.accelerator], p.gpus, STACKS[name],
                        overheads[name])
            for r in routing_for(s.model, rhos):
                c = curve(s, r, trees, p.chain_tau, shape)
                c = c.assign(model=s.model.name, dtype=s.model.dtype, accelerator=p.accelerator, gpus=p.gpus,
                             stack=name, routing=r.name,
                             tau_source=np.where(c.method == "ar", "", p.tau_source),
                             published_speedup=np.nan, error=np.nan, calibration=False,
                             source=f"{s.model.source}; {s.acc.source}")
                rows += c.to_dict("records")
    return rows


COLUMNS = ["model", "accelerator", "method", "budget", "tau", "predicted_speedup", "published_speedup", "calibration",
           "source", "gpus", "stack", "routing", "dtype", "tau_source", "published_tau", "error",
           "experts_per_layer", "round_ms", "ar_ms", "tokens_per_s"]


@dataclass(frozen=True)
class Inputs:
    """What every projection reads from the lab's stores: the drafter trees of the expert-union
    cases (parents, marginals), the union-implied rhos, and the lab's tau(B) shape."""
    cases: pd.DataFrame
    rhos: dict
    shape: dict

    @property
    def trees(self) -> list:
        return [m["parents"] for m in self.cases["_metrics"]]

    @property
    def measured(self) -> Routing:
        return Routing("measured", self.rhos["path"], self.rhos["sibling"])


def load_inputs(models: dict, directory=RESULTS_DIR) -> Inputs:
    """The inputs from the stores under ``directory`` (``models``: the MLA pair's digests)."""
    cases = eu.cases_frame(ResultsStore(eu.STORE, directory), eu.UnionConfig(), models)
    rhos = eu.pooled_rho(pd.read_csv(directory / eu.PAIRS_CSV), "union")
    return Inputs(cases, rhos, lab_tau_shape(ResultsStore("sweeps", directory).frame()))


def build(inputs: Inputs) -> tuple[pd.DataFrame, dict]:
    """(the stored projection table, {stack: fitted overhead s})."""
    overheads = {name: calibrate(stack, inputs.measured, inputs.trees, inputs.shape) for name, stack in STACKS.items()}
    rows = (published_rows(overheads, inputs.rhos, inputs.trees, inputs.shape)
            + projection_rows(overheads, inputs.rhos, inputs.trees, inputs.shape) + auto_rows(overheads, inputs))
    return pd.DataFrame(rows).reindex(columns=COLUMNS), overheads


# ----------------------------------------------------------------------------- the seed's question

def stop_paying(table: pd.DataFrame, model: str, accelerator: str, stack: str) -> pd.DataFrame:
    """Per routing bound: the best budget (peak projected speedup), its speedup, the largest budget
    still at or above the DFlash chain's speedup (``None``: never), and the speedup at 64 and 128."""
    rows = []
    t = table[(table.model == model) & (table.accelerator == accelerator) & (table["stack"] == stack)
              & table.published_speedup.isna()]
    for routing, g in t.groupby("routing", sort=False):
        trees = g[g.method == "ddtree"].set_index("budget")["predicted_speedup"]
        chain = float(g[g.method == "dflash"].predicted_speedup.iloc[0])
        above = trees[trees >= chain]
        rows.append({"routing": routing, "best_budget": int(trees.idxmax()), "best_speedup": float(trees.max()),
                     "dflash_speedup": chain, "last_budget_over_chain": int(above.index.max()) if len(above) else None,
                     "speedup_64": float(trees.get(64, np.nan)), "speedup_128": float(trees.get(128, np.nan))})
    return pd.DataFrame(rows)


def setting(model: str, accelerator: str, gpus: int, stack: str, overhead_s: float) -> Setting:
    return Setting(TARGETS[model], DRAFTERS[model], ACCELERATORS[accelerator], gpus, STACKS[stack], overhead_s)


def best_budget_at(s: Setting, rho_scale: float, inputs: Inputs, chain_tau: float) -> dict:
    """The widget's answer: best budget and speedup when the measured correlation is scaled by
    ``rho_scale`` (0: independent routing, 1: as measured)."""
    r = Routing("scaled", rho_scale * inputs.rhos["path"], rho_scale * inputs.rhos["sibling"])
    c = curve(s, r, inputs.trees, chain_tau, inputs.shape)
    trees_c = c[c.method == "ddtree"].set_index("budget")["predicted_speedup"]
    return {"curve": c, "best_budget": int(trees_c.idxmax()), "best_speedup": float(trees_c.max()),
            "dflash_speedup": float(c[c.method == "dflash"].predicted_speedup.iloc[0])}


# ----------------------------------------------------------------------------- expert-aware auto, projected

def auto_projection(s: Setting, inputs: Inputs, chain_tau: float, anchor: int = 64) -> pd.DataFrame:
    """Projected tokens per second of fixed budgets, node-count ``auto`` (its curve by node count
    from a profile with independent routing, or the mean of the trees) and expert-aware ``auto``
    (each tree priced by its own expected union), on the lab's drafter trees under the measured
    routing. A tree's expected tokens at n nodes: 1 + c x the sum of its first n marginals, c
    fitted so the trees' mean at ``anchor`` nodes equals tau(anchor) (the lab shape x ``chain_tau``).
    One row per policy: tokens per second (total tokens / total seconds), vs the best fixed budget."""
    measured, shape, trees = inputs.measured, inputs.shape, inputs.trees
    gains = [np.asarray(m["gains"], dtype=float) for m in inputs.cases["_metrics"]]
    rows = min(len(g) for g in gains)
    gains = np.stack([g[:rows] for g in gains])  # [trees, N]
    scale = (chain_tau * float(tau_ratio(shape, anchor)) - 1) / gains[:, :anchor].sum(1).mean()
    tokens = 1 + scale * np.cumsum(gains, 1)  # [trees, N]: expected tokens at n = 1..N nodes
    n = np.arange(1, rows + 1)
    true_cost = round_seconds(s, n + 1, tree_union(s.model, trees, measured, rows + 1)[:, 1:])  # [trees, N]
    indep = round_seconds(s, n + 1, tree_union(s.model, trees[:1], INDEPENDENT, rows + 1)[0, 1:])  # [N]

    def run(choice):  # choice [trees]: nodes per tree -> (tokens/s, mean nodes, tokens per round)
        i = np.arange(len(choice)), np.asarray(choice) - 1
        return tokens[i].sum() / true_cost[i].sum(), float(np.mean(choice)), float(tokens[i].mean())

    def auto(seconds):  # seconds [trees, N] or [N]: the allocator's pick per tree
        per = np.broadcast_to(seconds, tokens.shape)
        return [allocate_budgets([_t(scale * g)], _t(sec))[0] for g, sec in zip(gains, per)]
    fixed = {b: run([b] * len(trees)) for b in BUDGETS if b <= rows}
    best = max(fixed, key=lambda b: fixed[b][0])
    policies = {f"best fixed ({best})": fixed[best], "node-count auto (independent profile)": run(auto(indep)),
                "node-count auto (mean of the trees)": run(auto(true_cost.mean(0))),
                "expert-aware auto": run(auto(true_cost))}
    return pd.DataFrame([{"policy": k, "tokens_per_s": v, "vs_best_fixed": v / fixed[best][0], "mean_nodes": n,
                          "tau": t} for k, (v, n, t) in policies.items()])


AUTO_SETTINGS = (("Kimi K2.6", "h200", 8),)   # where the stored table projects the four policies


def auto_rows(overheads: dict, inputs: Inputs) -> list[dict]:
    """The projected policies (``auto_projection``, measured routing) as rows of the stored table:
    method "auto: <policy>", budget = the mean tree size it verified, tau = tokens per round."""
    rows = []
    for model, acc, gpus in AUTO_SETTINGS:
        for name in ("transformers-eager", "kernel-floor"):
            s = setting(model, acc, gpus, name, overheads[name])
            ar = ar_seconds(s)
            for r in auto_projection(s, inputs, CHAIN_TAU[model][0]).itertuples():
                rows.append({"model": model, "accelerator": acc, "gpus": gpus, "stack": name, "routing": "measured",
                             "dtype": s.model.dtype, "method": f"auto: {r.policy}", "budget": r.mean_nodes,
                             "tau": r.tau, "tau_source": "the lab's drafter trees, marginals scaled to tau(64)",
                             "tokens_per_s": r.tokens_per_s, "predicted_speedup": r.tokens_per_s * ar,
                             "ar_ms": 1e3 * ar, "published_speedup": np.nan, "calibration": False,
                             "source": f"{s.model.source}; {s.acc.source}"})
    return rows


def _t(x):
    return torch.tensor(np.array(x, dtype=np.float64))


def write(table: pd.DataFrame, directory=RESULTS_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    table.to_csv(directory / PROJECTION_CSV, index=False, float_format="%.6g")


def seed_answer(table: pd.DataFrame, model: str = "Kimi K2.6", accelerator: str = "h200") -> str:
    """One sentence per stack: the best budget under each routing bound, the last budget still
    above the chain, and how far the seed's 64-128+ lies from the best budget."""
    out = []
    for stack in dict.fromkeys(table[(table.model == model) & (table.accelerator == accelerator)]["stack"]):
        stop = stop_paying(table, model, accelerator, stack).set_index("routing")
        best = ", ".join(f"{r} {int(b)}" for r, b in stop.best_budget.items())
        over = ", ".join(f"{r} {'never' if pd.isna(v) else int(v)}" for r, v in stop.last_budget_over_chain.items())
        lo, hi = int(stop.best_budget.min()), int(stop.best_budget.max())
        far = "inside it" if lo >= 64 else f"{64 / hi:g}x to {128 / lo:g}x past the best budget"
        out.append(f"{model} on {accelerator}, {stack}: the projected speedup peaks at budget {lo}"
                   + (f"-{hi}" if hi != lo else "") + f" (by routing: {best}); DDTree stays at or above the DFlash "
                   f"chain up to budget {over}; the seed's 64-128+ is {far}.")
    return "\n".join(out)


def main(argv=None) -> None:
    """``python -m ddtree_lab.experiments.studies.gpu_projection``: build and store the table
    from the sweeps store, the expert-union store and ``expert_pairs.csv``."""
    table, overheads = build(load_inputs(load_pair("mla").digests))
    write(table)
    print({k: f"{v * 1e3:.4f} ms" for k, v in overheads.items()})
    pub = table[table.published_speedup.notna()]
    print(pub[["model", "stack", "method", "budget", "tau", "predicted_speedup", "published_speedup", "error",
               "calibration"]].to_string(index=False))
    print(seed_answer(table))


if __name__ == "__main__":
    main()
