"""``ddtree-lab quality``: how good the shipped targets and drafters are (HumanEval, T=0).

Targets: validation loss per token (the corpus's held-out packages), loss on the HumanEval
canonical solutions (held-out code nobody here wrote) and the loop rate of their greedy
continuations. Drafters: top-1 agreement with the
target's greedy continuation per block position, and the linear acceptance length tau at
blocks 8 and 16 (DFlash decoding), next to DDTree-64; plus the lossless check: T=0
speculative output equals AR on every prompt.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch

from ...train import data
from ...train.checkpoints import check_manifest, ckpt_path
from ...train.drafters import draft_quality
from ...train.rollouts import make_rollouts
from ...common import RESULTS_DIR
from ...train.loops import is_looping
from ..plumbing.results import ResultsStore
from ..plumbing.summary import ar_divergence, equals_ar
from ..plumbing.sweep import expand_grid, run_sweep
from .official import run_with_official

# issue 11: HumanEval canonical-solution loss (nats/token), share of greedy 128-token
# continuations ending in a loop (``loops.is_looping``), linear tau at block 8
QUALITY_JSON = RESULTS_DIR / "quality-gdn-mla.json"
GOALS = {"humaneval_solution_loss": 2.8, "loop_rate": 0.40, "tau_block8": 3.0}


@torch.no_grad()
def humaneval_solution_loss(target, tok) -> float:
    """Mean next-token loss (nats) on the canonical-solution tokens, given each prompt."""
    nll, count = 0.0, 0
    for p in data.humaneval_problems():
        prompt = tok.encode(p["prompt"]).ids
        full = tok.encode(p["prompt"] + p["canonical_solution"]).ids
        start = max(1, min(len(prompt), len(full) - 1))
        ids = torch.tensor(full)
        logits = target(ids[None, :-1]).logits[0].float()
        losses = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")
        nll += float(losses[start - 1:].sum())
        count += len(full) - start
    return nll / count


def humaneval_agreement(target, drafter, tok, block_size: int = 16, prompt_len: int = 64,
                        new_tokens: int = 64) -> dict:
    """Top-1 agreement per block position with the target's greedy continuation of the
    HumanEval prompts (left-truncated to ``prompt_len`` tokens; shorter ones skipped)."""
    roll = make_rollouts(target, tok, data.humaneval_prompts(), new_tokens=new_tokens,
                         prompt_len=prompt_len, layer_ids=drafter.cfg.target_layer_ids)
    return {**draft_quality(drafter, roll, block_size), "prompts": int(roll["num_rollouts"])}


def quality_grid(archs=("gdn", "mla"), max_new_tokens: int = 128) -> list[dict]:
    """AR, DFlash at blocks 8 and 16, DDTree-64 at block 8 (GDN: both exact modes, wy and fork),
    and the field's reference loop (``dflash_generate``, method "official") at blocks 8 and 16."""
    common = dict(temperature=[0.0], max_new_tokens=[max_new_tokens])
    return (expand_grid(arch=list(archs), method=["ar"], budget=[0], block_size=[0], gdn_mode=["wy"], **common)
            + expand_grid(arch=list(archs), method=["dflash"], budget=[0], block_size=[8, 16], gdn_mode=["wy"],
                          **common)
            + expand_grid(arch=list(archs), method=["ddtree"], budget=[64], block_size=[8],
                          gdn_mode=["wy", "fork"], **common)
            + expand_grid(arch=list(archs), method=["official"], budget=[0], block_size=[8, 16], gdn_mode=["wy"],
                          **common))


def lossless_and_tau(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (arch, method, block, budget): tau (accepted tokens per target forward, pooled over
    every round of every prompt), tau_prompt_mean (mean of per-prompt taus), prompts,
    fraction identical to AR."""
    spec = frame[frame.method != "ar"].copy()
    spec["same_as_ar"] = [equals_ar(d) for d in ar_divergence(spec, frame, key=("arch",))]
    spec["_acc"] = [sum(m["acceptance_lengths"]) for m in spec["_metrics"]]
    spec["_rounds"] = [len(m["acceptance_lengths"]) for m in spec["_metrics"]]
    out = (spec.groupby(["arch", "method", "gdn_mode", "block_size", "budget"])
           .agg(tau_prompt_mean=("tau", "mean"), _acc=("_acc", "sum"), _rounds=("_rounds", "sum"),
                prompts=("prompt", "count"), same_as_ar=("same_as_ar", "mean"))
           .reset_index())
    out["tau"] = out._acc / out._rounds.clip(lower=1)
    return out.drop(columns=["_acc", "_rounds"])


def target_table(pairs: dict, shipped: bool = True) -> pd.DataFrame:
    """One row per pair ({arch: Pair}): drafter agreement with the target's greedy HumanEval
    continuations, the canonical-solution loss and (``shipped``: the shipped checkpoints, whose
    manifests the lab wrote) sizes, losses and train times from the manifests."""
    rows = []
    for arch, (target, drafter, tok) in pairs.items():
        he = humaneval_agreement(target, drafter, tok, block_size=min(16, drafter.cfg.block_size))
        row = {"arch": arch, "humaneval_agreement_block16": [round(a, 3) for a in he["agreement"]],
               "humaneval_offline_tau_block16": he["tau"], "humaneval_solution_loss": humaneval_solution_loss(target, tok)}
        rows.append({**row, **(_manifest_columns(arch) if shipped else {})})
    return pd.DataFrame(rows)


def _manifest_columns(arch: str) -> dict:
    """Sizes, losses and train times of the shipped pair of ``arch``, from its manifests."""
    tman = check_manifest(ckpt_path(arch, "target"))
    dman = check_manifest(ckpt_path(arch, "drafter"))
    return {"params_total": tman["parameters"]["total"], "params_active": tman["parameters"]["active"],
            "val_loss": tman["final_val_loss"], "target_train_min": tman["train_time_s"] / 60,
            "drafter_val_loss": dman["final_val_loss"], "drafter_train_min": dman["train_time_s"] / 60,
            "agreement_block16": dman.get("agreement_block16"), "offline_tau_block16": dman.get("tau_block16"),
            "offline_tau_block8": dman.get("tau_block8")}


def run_quality(pairs: dict, num_prompts: int = 164, max_new_tokens: int = 128, directory=RESULTS_DIR,
                manifests: bool | None = None) -> dict:
    """Compute and print both tables for ``pairs`` ({arch: Pair}); the shipped pairs' go into
    data/results/quality-gdn-mla.json (other targets' rows kept). A run with its own results
    folder (``directory``: a pair of one's own, a prompts file or another dtype,
    ``cli._chosen_pairs``) keeps its rows and its quality.json there. manifests: whether the
    pairs are the shipped checkpoints, whose manifests fill the target table's sizes, losses
    and train times (None: when ``directory`` is the README's)."""
    archs, shipped = tuple(pairs), Path(directory) == RESULTS_DIR
    tt = target_table(pairs, shipped if manifests is None else manifests)
    store = ResultsStore("quality", directory)
    frame = run_sweep(quality_grid(archs, max_new_tokens), list(range(num_prompts)), store, pairs,
                      runner=run_with_official)
    lt = lossless_and_tau(frame[frame.prompt < num_prompts])
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        print(tt.to_string(index=False))
        print(lt.to_string(index=False))
    rates = loop_rates(frame[frame.prompt < num_prompts])
    for r in tt.itertuples():
        print(f"{r.arch}: HumanEval solution loss {r.humaneval_solution_loss:.3f} (goal <= "
              f"{GOALS['humaneval_solution_loss']}: {_verdict(r.humaneval_solution_loss <= GOALS['humaneval_solution_loss'])}); "
              f"loop rate {rates[r.arch]:.2f} (goal <= {GOALS['loop_rate']}: {_verdict(rates[r.arch] <= GOALS['loop_rate'])})")
    for r in lt[(lt.method == "dflash") & (lt.block_size == 8)].itertuples():
        print(f"{r.arch}: linear tau at block 8 {r.tau:.2f} (goal >= {GOALS['tau_block8']}: "
              f"{_verdict(r.tau >= GOALS['tau_block8'])})")
    out = {"targets": tt.to_dict("records"), "decoding": lt.to_dict("records")}
    path = QUALITY_JSON if shipped else Path(directory) / "quality.json"
    path.write_text(json.dumps(merge_quality(path, out, archs), indent=1, default=_jsonable))
    print(f"tables -> {path}")
    return out


def merge_quality(path, out: dict, archs: tuple) -> dict:
    """``out`` (tables of ``archs``) over the stored tables of the other targets, so the
    targets can run as separate processes (one core each); targets in ARCH order."""
    old = json.loads(path.read_text()) if path.is_file() else {"targets": [], "decoding": []}
    order = {"gdn": 0, "mla": 1}
    return {k: sorted([r for r in old[k] if r["arch"] not in archs] + out[k], key=lambda r: order.get(r["arch"], 2))
            for k in ("targets", "decoding")}


def loop_rates(frame: pd.DataFrame) -> dict:
    """{arch: share of the AR (greedy) continuations that end in a loop}."""
    ar = frame[frame.method == "ar"]
    return {arch: float(pd.Series([is_looping(m["tokens"]) for m in g["_metrics"]]).mean())
            for arch, g in ar.groupby("arch")}


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _jsonable(x):
    return None if isinstance(x, float) and math.isnan(x) else float(x)
