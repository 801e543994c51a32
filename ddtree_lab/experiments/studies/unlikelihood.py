"""Issue 70: do unlikelihood-fine-tuned targets (``train.unlikelihood``) stop looping, at what cost?

Per target, on ``EVAL_PROMPTS`` HumanEval prompts spread over the 164 (never trained on: the
corpus drops every file holding HumanEval text), 128 greedy tokens each (KV-cached argmax,
``rollouts.continue_prompts``):

- loop_share_lens: share of continuations that end in a loop by the lab's loop lens
  (``loops.is_looping``);
- loop_share_tail: share that end in a plain repeating tail: the last ``TAIL_WINDOW`` tokens
  exactly periodic with a period <= ``TAIL_MAX_PERIOD`` (the issue's probe lens);
- rep4_median: median over prompts of seq-rep-4 = 1 - distinct 4-grams / 4-grams (Welleck et
  al., arXiv 1908.04319, section 4);
- solution_loss: the HumanEval canonical-solution loss (``quality.humaneval_solution_loss``,
  all 164 problems), delta_loss: against the shipped target's, measured here the same way.

One row per run in ``data/results/unlikelihood.csv`` (the shipped targets are rows with
candidates "shipped", alpha 0, steps 0), each with the stamp of when it was measured; three
sample continuations per run in ``unlikelihood_samples.json``. Goal (issue 70): loop share
<= ``GOAL_LOOPS`` with delta_loss <= ``GOAL_DELTA`` (``meets_goal``: the issue states it on the
tail lens; meets_goal_lens: on the lab's lens).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ...common import RESULTS_DIR, ROOT
from ...core.models import load_target
from ...train import data
from ...train.checkpoints import CKPT_DIR, ckpt_path
from ...train.corpus import build_corpus
from ...train.rollouts import continue_prompts
from ...train.targets import ship_target
from ...train.unlikelihood import CANDIDATES, finetune_target
from ...train.loops import distinct_ngram_share, is_looping, loop_period
from ..plumbing.results import ResultsStore, stamp, write_timing_table
from .compare_drafters import spread_prompts
from .quality import humaneval_solution_loss

TABLE = RESULTS_DIR / "unlikelihood.csv"
SAMPLES = RESULTS_DIR / "unlikelihood_samples.json"
NEW_TOKENS = 128
EVAL_PROMPTS = 41                      # of the 164, spread evenly (3.5 s a prompt on this shared CPU)
SAMPLE_PROMPTS = (0, 100, 107)         # HumanEval/100 and /107: the examples
TAIL_WINDOW, TAIL_MAX_PERIOD = 48, 24  # the plain lens: the last 48 tokens periodic, period <= 24
GOAL_LOOPS, GOAL_DELTA = 0.20, 0.10
COLUMNS = ["run", "arch", "candidates", "alpha", "steps", "lr", "prompts", "loop_share_lens", "loop_share_tail",
           "solution_loss", "delta_loss", "rep4_median", "val_loss", "minutes", "meets_goal", "meets_goal_lens"]


def ends_in_repeating_tail(tokens, window: int = TAIL_WINDOW, max_period: int = TAIL_MAX_PERIOD) -> bool:
    """True when the last ``window`` tokens repeat exactly with some period <= ``max_period``."""
    return loop_period(tokens, max_period=max_period, repeats=2, min_window=window, drift=0.0) > 0


def rep4(tokens) -> float:
    """seq-rep-4 of one continuation: 1 - distinct 4-grams / 4-grams."""
    return 1.0 - distinct_ngram_share(list(tokens), 4)


@torch.no_grad()
def greedy_outputs(model, tok, prompts, new_tokens: int = NEW_TOKENS, progress: bool = True) -> dict:
    """{HumanEval index: [new_tokens] greedy continuation token ids} of ``prompts`` (indices)."""
    out = {}
    for i in tqdm(list(prompts), desc="greedy", disable=not progress, leave=False):
        ids = torch.tensor([data.prompt_tokens(tok, i)])
        out[i] = continue_prompts(model, ids, new_tokens)[0, ids.shape[1]:].tolist()
    return out


def loop_metrics(outputs: dict) -> dict:
    """The loop columns of one run from its greedy outputs ({index: token ids})."""
    seqs = list(outputs.values())
    return {"prompts": len(seqs), "loop_share_lens": float(np.mean([is_looping(s) for s in seqs])),
            "loop_share_tail": float(np.mean([ends_in_repeating_tail(s) for s in seqs])),
            "rep4_median": float(np.median([rep4(s) for s in seqs]))}


def eval_prompts(count: int = EVAL_PROMPTS) -> list[int]:
    """The HumanEval indices the loop columns are measured on: ``count`` spread evenly over the 164."""
    return spread_prompts(count)


def evaluate(model, tok, prompts=None, progress: bool = True) -> tuple[dict, dict]:
    """(the measured columns, the greedy outputs) of one target: the loop columns over ``prompts``
    (default ``eval_prompts()``), the outputs of those and of ``SAMPLE_PROMPTS``."""
    model.eval()
    prompts = eval_prompts() if prompts is None else list(prompts)
    outputs = greedy_outputs(model, tok, sorted(set(prompts) | set(SAMPLE_PROMPTS)), progress=progress)
    cols = loop_metrics({i: outputs[i] for i in prompts})
    return {**cols, "solution_loss": humaneval_solution_loss(model, tok)}, outputs


def run_name(arch: str, candidates: str, alpha: float, steps: int, lr: float) -> str:
    """'gdn-ngram-a0.5-s250-lr0.0001' ('gdn-shipped' for the shipped target)."""
    return f"{arch}-shipped" if candidates == "shipped" else f"{arch}-{candidates}-a{alpha:g}-s{steps}-lr{lr:g}"


def upsert(row: dict, path: Path = TABLE) -> pd.DataFrame:
    """Write ``row`` (with this moment's stamp) into the table, replacing the row of its run."""
    old = pd.read_csv(path) if Path(path).is_file() else pd.DataFrame()
    new = pd.DataFrame([{**row, **stamp()}])
    frame = pd.concat([old[old["run"] != row["run"]] if len(old) else old, new], ignore_index=True)
    frame = frame.sort_values(["arch", "steps", "candidates", "alpha"], kind="stable")
    frame = frame[[c for c in COLUMNS if c in frame] + [c for c in frame if c not in COLUMNS]]
    tmp = Path(path).with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)
    return frame


def save_samples(run: str, tok, outputs: dict, path: Path = SAMPLES) -> None:
    """The decoded continuations of ``SAMPLE_PROMPTS`` of one run into the samples file."""
    old = json.loads(Path(path).read_text()) if Path(path).is_file() else {}
    old[run] = {str(i): tok.decode(outputs[i]) for i in SAMPLE_PROMPTS if i in outputs}
    Path(path).write_text(json.dumps(old, indent=1, sort_keys=True))


def shipped_loss(arch: str, path: Path = TABLE) -> float | None:
    """The stored solution loss of the shipped target of ``arch`` (None before it is measured)."""
    if not Path(path).is_file():
        return None
    t = pd.read_csv(path)
    hit = t[t["run"] == run_name(arch, "shipped", 0, 0, 0)]
    return float(hit["solution_loss"].iloc[0]) if len(hit) else None


def measure_shipped(arch: str, path: Path = TABLE, samples: Path = SAMPLES) -> dict:
    """Measure the shipped target of ``arch`` and store its row."""
    tok = data.load_tokenizer()
    model = load_target(ckpt_path(arch, "target"))
    cols, outputs = evaluate(model, tok)
    row = {"run": run_name(arch, "shipped", 0, 0, 0), "arch": arch, "candidates": "shipped", "alpha": 0.0,
           "steps": 0, "lr": 0.0, **cols, "delta_loss": 0.0, "val_loss": float("nan"), "minutes": 0.0}
    row = with_goals(row)
    upsert(row, path)
    save_samples(row["run"], tok, outputs, samples)
    return row


def meets_goal(row: dict, loops: str = "loop_share_tail") -> bool:
    """Issue 70's goal: loop share <= 0.20 and solution loss within +0.10 nats of shipped. The
    issue states it on the plain tail lens (its baseline, 65%, is that lens's); ``loops`` names
    the column ("loop_share_lens": the lab's stricter lens, column meets_goal_lens)."""
    return bool(row[loops] <= GOAL_LOOPS and row["delta_loss"] <= GOAL_DELTA)


def with_goals(row: dict) -> dict:
    """``row`` with meets_goal (tail lens) and meets_goal_lens (the lab's lens)."""
    return {**row, "meets_goal": meets_goal(row), "meets_goal_lens": meets_goal(row, "loop_share_lens")}


def run_unlikelihood(arch: str, cfg, runs_root: Path = ROOT / "runs" / "unlikelihood", *, path: Path = TABLE,
                     samples: Path = SAMPLES, ship: bool = False) -> dict:
    """Fine-tune (or resume) the shipped target of ``arch`` with ``cfg`` (an
    ``UnlikelihoodConfig``), measure it and store its row; the shipped target's row first if
    missing. ship: save a target that meets the goal under data/checkpoints/unlikelihood/."""
    run = run_name(arch, cfg.candidates, cfg.alpha, cfg.steps, cfg.lr)
    t0 = time.monotonic()
    model, st = finetune_target(arch, cfg, Path(runs_root) / run)
    base = shipped_loss(arch, path)
    if base is None:
        base = measure_shipped(arch, path, samples)["solution_loss"]
    tok = data.load_tokenizer()
    cols, outputs = evaluate(model, tok)
    row = {"run": run, "arch": arch, "candidates": cfg.candidates, "alpha": float(cfg.alpha), "steps": cfg.steps,
           "lr": float(cfg.lr), **cols, "delta_loss": cols["solution_loss"] - base,
           "val_loss": st["val_loss"], "minutes": st["elapsed_s"] / 60}
    row = with_goals(row)
    upsert(row, path)
    save_samples(run, tok, outputs, samples)
    print(f"{run}: loops {row['loop_share_lens']:.2f} (lens) / {row['loop_share_tail']:.2f} (tail), solution loss "
          f"{row['solution_loss']:.3f} ({row['delta_loss']:+.3f}), rep-4 median {row['rep4_median']:.2f}, "
          f"{row['minutes']:.1f} min of training; goal {'met' if row['meets_goal'] else 'missed'} (tail lens), "
          f"{'met' if row['meets_goal_lens'] else 'missed'} (lab lens) "
          f"(evaluation {(time.monotonic() - t0) / 60 - row['minutes']:.1f} min)")
    if ship and row["meets_goal"] and better_than_saved(row):
        ship_finetuned(model, arch, cfg, st, row)
    return row


def saved_dir(arch: str) -> Path:
    """Where a fine-tuned target of ``arch`` that meets the goal is saved."""
    return CKPT_DIR / "unlikelihood" / f"{arch}-target"


def better_than_saved(row: dict) -> bool:
    """True when no fine-tune of the row's arch is saved, or the saved one loops more (tail lens;
    ties: the lower loss) than ``row``: a later run never replaces a better saved one."""
    man = saved_dir(row["arch"]) / "manifest.json"
    if not man.is_file():
        return True
    old = json.loads(man.read_text())["measured"]
    return (row["loop_share_tail"], row["delta_loss"]) < (old["loop_share_tail"], old["delta_loss"])


def ship_finetuned(model, arch: str, cfg, st: dict, row: dict) -> Path:
    """Save a fine-tuned target (bf16, its manifest: the config and the measured row) under
    data/checkpoints/unlikelihood/{arch}-target; the shipped targets are left as they are."""
    out = saved_dir(arch)
    val = build_corpus(tok=data.load_tokenizer())["val"] % model.config.vocab_size
    ship_target(model, out, val_tokens=val, seq_len=cfg.mle_len, eval_windows=64, arch=arch, preset="unlikelihood",
                unlikelihood=asdict(cfg), train_state=st, measured=row)
    return out


def candidate_rules(outputs: dict, tok) -> pd.DataFrame:
    """What each candidate rule (``train.unlikelihood.CANDIDATES``) marks in the shipped targets'
    greedy continuations, with no training: outputs {(arch, HumanEval index): token ids} ->
    one row per (arch, rule): tokens_marked (share of all continuation tokens),
    marked_outside_loops (share of the tokens of continuations that do NOT end in a loop by the
    lab's lens: repetition the rule would penalise in text that is not a loop, e.g. code's
    legitimate repeats), marked_in_loops, and overlap (Jaccard of the two rules' marks)."""
    rows = []
    for arch in sorted({a for a, _ in outputs}):
        marks = {name: [] for name in CANDIDATES}
        looping = []
        for (a, i), tokens in outputs.items():
            if a != arch:
                continue
            prompt = data.prompt_tokens(tok, i)
            for name, rule in CANDIDATES.items():
                marks[name].append(np.asarray(rule(prompt, tokens), dtype=bool))
            looping.append(is_looping(tokens))
        both = [m & n for m, n in zip(*marks.values())]
        either = [m | n for m, n in zip(*marks.values())]
        overlap = sum(int(b.sum()) for b in both) / max(1, sum(int(e.sum()) for e in either))
        for name, m in marks.items():
            rows.append({"arch": arch, "rule": name, "continuations": len(m),
                         "tokens_marked": float(np.concatenate(m).mean()),
                         "marked_outside_loops": _marked_share(m, looping, False),
                         "marked_in_loops": _marked_share(m, looping, True), "overlap": overlap})
    return pd.DataFrame(rows)


def _marked_share(marks: list, looping: list, keep: bool) -> float:
    """Share of marked tokens over the continuations whose loop flag is ``keep`` (nan: none)."""
    chosen = [m for m, lo in zip(marks, looping) if lo == keep]
    return float(np.concatenate(chosen).mean()) if chosen else float("nan")


def shipped_ar_outputs(directory: Path = RESULTS_DIR) -> dict:
    """{(arch, HumanEval index): tokens} of the shipped targets' stored greedy (AR) continuations
    (the quality store: 164 prompts, 128 tokens)."""
    frame = ResultsStore("quality", directory).frame()
    ar = frame[(frame.method == "ar") & (frame.temperature == 0)]
    return {(a, int(p)): list(m["tokens"]) for a, p, m in zip(ar.arch, ar.prompt, ar["_metrics"])}


RULES_TABLE = RESULTS_DIR / "unlikelihood_rules.csv"


def store_candidate_rules(path: Path = RULES_TABLE) -> pd.DataFrame:
    """``candidate_rules`` on the shipped targets' stored greedy continuations, into ``path`` (stamped)."""
    table = candidate_rules(shipped_ar_outputs(), data.load_tokenizer())
    write_timing_table(table, path)
    return table
