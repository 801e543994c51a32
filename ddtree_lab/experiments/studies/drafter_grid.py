"""The drafter grid (issue 27): how the share of real-code windows and the training length
trade free-running acceptance (the target's own text, what decoding sees) against
teacher-forced acceptance on real code.

Every point is one DFlash drafter for the shipped target, trained on the same data
(``train.drafters.training_data``: the target's rollouts with soft labels, the stdlib
windows) by the default recipe with ``corpus_share`` and the step count changed. Each is
measured on three lenses:

- ``heldout_tau_block8``: linear tau on the held-out greedy rollouts, every anchor
  (``draft_quality``; the manifest's figure);
- ``decode_*``: DFlash (block 8) and DDTree-16 decoding HumanEval prompts at T = 0,
  ``DECODE_MAX_NEW`` tokens, tau pooled over rounds, all rounds and outside repetition loops
  (``train.loops``);
- ``tf_*``: teacher-forced tau on the HumanEval canonical solutions (``teacher_forced``,
  the same problems and stride as notebook 05's lens), DFlash and DDTree-64.

Rows go to ``data/results/training/grid/drafter_grid.csv``, one per (arch, point); a point with a
row is skipped, a point half trained resumes from its run folder. ``ship_rule`` picks the
drafter to ship.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ...common import DATA_DIR, RESULTS_DIR
from ...train import data
from ...train.drafters import LABELS, RECIPES, DrafterRecipe, fit_drafter, training_data, with_knobs
from ...train.pair import load_pair
from .compare_drafters import METHODS, decode_once, pooled_tau
from .teacher_forced import humaneval_texts, teacher_forced

GRID_CSV = RESULTS_DIR / "training" / "grid" / "drafter_grid.csv"  # apart from the loss curves beside it
RUNS = DATA_DIR / "runs"
DECODE_PROMPTS = tuple(range(0, 164, 4))  # 41 HumanEval prompts
DECODE_MAX_NEW = 128
TF_PROBLEMS = tuple(range(40))            # notebook 05's teacher-forced problems and stride
TF_STRIDE = 16
BLOCK = 8
DEFAULT_LAYERS = RECIPES["default"].num_layers  # the shipped drafter's depth
MAX_LAYERS = 12


@dataclass(frozen=True)
class GridPoint:
    """share: real-code windows per batch (``DrafterRecipe.corpus_share``); steps: optimizer
    steps; labels: ``drafters.LABELS`` ("soft": the target's top-8 everywhere, as shipped
    today; "mixed": hard on the rollouts, soft on real code; "hard": the sequences' tokens);
    layers: the drafter's decoder layers (``DEFAULT_LAYERS``, the shipped depth, unless set)."""
    share: float
    steps: int
    labels: str = "soft"
    layers: int = DEFAULT_LAYERS

    def __post_init__(self):
        if not 0 <= self.share <= 1:
            raise ValueError(f"share must be in [0, 1], got {self.share}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.labels not in LABELS:
            raise ValueError(f"labels must be one of {tuple(LABELS)}, got {self.labels!r}")
        if not 1 <= self.layers <= MAX_LAYERS:
            raise ValueError(f"layers must be in [1, {MAX_LAYERS}], got {self.layers}")

    @property
    def name(self) -> str:
        return (f"share{self.share:g}-steps{self.steps}" + ("" if self.labels == "soft" else f"-{self.labels}")
                + ("" if self.layers == DEFAULT_LAYERS else f"-layers{self.layers}"))

    def recipe(self, base: DrafterRecipe = RECIPES["default"]) -> DrafterRecipe:
        return with_knobs(base, self.share, self.steps, self.labels, self.layers)


SUFFIXES = {"": "soft", "m": "mixed", "h": "hard"}


def parse_point(text: str) -> GridPoint:
    """'0.25x6000' (soft labels), '0.25x6000m' (mixed), '0x3000h' (hard), each with an optional
    '@L' for a drafter of L layers ('0.25x6000@5') -> GridPoint."""
    body, at, layers = text.partition("@")
    suffix = body[-1] if body[-1:] in ("m", "h") else ""
    share, _, steps = body[:len(body) - len(suffix)].partition("x")
    try:
        return GridPoint(float(share), int(steps), SUFFIXES[suffix], int(layers) if at else DEFAULT_LAYERS)
    except ValueError as e:
        raise ValueError(f"a grid point is SHARExSTEPS[m|h][@LAYERS], e.g. 0.25x6000m@5, got {text!r} ({e})") from None


def point_dir(arch: str, point: GridPoint, runs: Path = RUNS) -> Path:
    return Path(runs) / f"{arch}-grid" / point.name


def labels_of(training: tuple, labels: str) -> tuple:
    """``training`` (``training_data`` with soft labels everywhere) as a point of ``labels``
    trains on it: soft labels dropped from the rollouts ("mixed") or from both ("hard")."""
    corpus_soft, rollout_soft = LABELS[labels]
    rollouts, train_r, val_r, corpus = training
    strip = (lambda d: None if d is None else {k: v for k, v in d.items() if k not in ("soft_ids", "soft_probs")})
    return rollouts, train_r if rollout_soft else strip(train_r), val_r, corpus if corpus_soft else strip(corpus)


def decode_lens(pair, prompts=DECODE_PROMPTS, max_new_tokens: int = DECODE_MAX_NEW) -> dict:
    """DFlash (block 8) and DDTree-16 on ``prompts`` at T = 0: tau pooled over rounds, all,
    outside loops and clean (neither looping nor copyable), the shares of rounds in loops and
    copyable; plus whether both equal each other."""
    out, tokens = {}, {}
    for method, budget in METHODS:
        runs = [decode_once(pair.target, pair.drafter, pair.prompt_ids(i), method, budget, block_size=BLOCK,
                            max_new_tokens=max_new_tokens) for i in prompts]
        split, key = pooled_tau(runs), method if budget is None else f"{method}{budget}"
        out |= {f"decode_{key}_tau": split["tau"], f"decode_{key}_tau_outside_loops": split["tau_outside_loops"],
                f"decode_{key}_loop_round_share": split["loop_round_share"],
                f"decode_{key}_copyable_share": split["copyable_share"], f"decode_{key}_tau_clean": split["tau_clean"]}
        tokens[method] = [r["tokens"] for r in runs]
    out["decode_outputs_equal"] = tokens["dflash"] == tokens["ddtree"]
    return out


def tf_lens(pair, problems=TF_PROBLEMS, stride: int = TF_STRIDE) -> dict:
    """Teacher-forced tau on the canonical solutions: DFlash (block 8) and DDTree-64."""
    texts, starts = humaneval_texts(pair.tokenizer, problems)
    frame = teacher_forced(pair.target, pair.drafter, texts, starts, budgets=(64,), block_size=BLOCK,
                           stride=stride, gdn_mode="wy", progress=False)
    return {"tf_dflash_tau": frame[frame.method == "dflash"].acceptance.mean(),
            "tf_ddtree64_tau": frame[frame.method == "ddtree"].acceptance.mean(),
            "tf_positions": int((frame.method == "dflash").sum())}


def measure(arch: str, drafter_dir: Path) -> dict:
    """Every lens but the held-out one (which needs the training split) for one drafter directory."""
    pair = load_pair(arch, drafter_path=drafter_dir)
    return {"drafter_sha256": pair.drafter_digest, **decode_lens(pair), **tf_lens(pair)}


def done_points(path: Path = GRID_CSV) -> set:
    """(arch, point) pairs with a stored row."""
    if not Path(path).is_file():
        return set()
    frame = pd.read_csv(path)
    return set(zip(frame.arch, frame.point))


def append_row(row: dict, path: Path = GRID_CSV) -> None:
    """Append one row (a new column widens the file), under a lock: both targets' runs write
    the one file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        frame = pd.read_csv(path) if path.is_file() else pd.DataFrame()
        tmp = path.with_suffix(".csv.tmp")
        pd.concat([frame, pd.DataFrame([row])], ignore_index=True).to_csv(tmp, index=False)
        tmp.replace(path)


def grid_row(arch: str, point: str, source: str, share: float, steps: int, labels: str, *, drafter_dir: Path,
             manifest: dict) -> dict:
    """One stored row: the point, its held-out figures (``manifest``'s: the rollouts' held-out
    split), the drafter's depth (its config's), every other lens (``measure``) and the machine's load."""
    layers = json.loads((Path(drafter_dir) / "config.json").read_text())["num_hidden_layers"]
    return {"arch": arch, "point": point, "source": source, "share": share, "steps": steps, "labels": labels,
            "layers": layers,
            "heldout_tau_block8": manifest["tau_block8"], "heldout_tau_block16": manifest["tau_block16"],
            "final_val_loss": manifest["final_val_loss"], "train_time_s": manifest.get("train_time_s"),
            **measure(arch, drafter_dir), "load_avg_1min": os.getloadavg()[0]}


def run_point(arch: str, point: GridPoint, training: tuple, mask_token_id: int, target, *, path: Path = GRID_CSV,
              runs: Path = RUNS) -> dict:
    """Train one grid point (or resume it), measure it, append its row."""
    folder = point_dir(arch, point, runs)
    manifest = fit_drafter(target, arch, point.recipe(), labels_of(training, point.labels), mask_token_id,
                           folder / "run", out=folder / "drafter")
    row = grid_row(arch, point.name, "trained", point.share, point.steps, point.labels,
                   drafter_dir=folder / "drafter", manifest=manifest)
    append_row(row, path)
    return row


def run_reference(arch: str, name: str, drafter_dir: Path, *, share: float, steps: int, labels: str,
                  path: Path = GRID_CSV) -> dict:
    """A drafter trained elsewhere (the shipped one, the previous release's) on the same lenses."""
    manifest = json.loads((Path(drafter_dir) / "manifest.json").read_text())
    row = grid_row(arch, name, name, share, steps, labels, drafter_dir=drafter_dir, manifest=manifest)
    append_row(row, path)
    return row


def run_grid(arch: str, points, references: dict | None = None, *, path: Path = GRID_CSV, runs: Path = RUNS,
             deadline: float | None = None, minutes_per_kstep: float = 6.0) -> pd.DataFrame:
    """Every reference ({name: (dir, share, steps, labels)}) and grid point of one target not yet
    stored, in order; a point whose training would end after ``deadline`` (epoch seconds, at
    ``minutes_per_kstep``) is left for a later run. -> the stored grid of ``arch``."""
    done = done_points(path)
    for name, (folder, share, steps, labels) in (references or {}).items():
        if (arch, name) not in done:
            run_reference(arch, name, folder, share=share, steps=steps, labels=labels, path=path)
    todo = [p for p in points if (arch, p.name) not in done]
    if todo:
        pair = load_pair(arch)
        tok = data.load_tokenizer()
        training = training_data(pair.target, RECIPES["default"], tok, None, RECIPES["default"].train.seed,
                                 data.CACHE_DIR)
        mask = data.special_ids(tok)["mask"]
        for point in tqdm(todo, desc=f"drafter grid {arch}"):
            if deadline is not None and time.time() + 60 * minutes_per_kstep * point.steps / 1000 > deadline:
                print(f"{point.name}: would end after the deadline, left for a later run")
                continue
            run_point(arch, point, training, mask, pair.target, path=path, runs=runs)
    frame = pd.read_csv(path)
    return frame[frame.arch == arch]


def tf_floor(grid: pd.DataFrame) -> dict:
    """{arch: the teacher-forced DFlash tau of the drafter shipped when the grid ran} (its
    stored "shipped" row): what a drafter to ship must keep (issue 27)."""
    shipped = grid[grid.source == "shipped"]
    return dict(zip(shipped.arch, shipped.tf_dflash_tau))


def ship_rule(grid: pd.DataFrame, floor: dict | None = None, pool=("trained",)) -> pd.DataFrame:
    """Per arch, the drafter to ship (issue 27): among the grid's own trainings (``pool``: the
    shipped and previous drafters are the yardsticks, not candidates), the highest free-running
    tau (DFlash decoding, all rounds) of those whose teacher-forced DFlash tau is at least
    ``floor[arch]`` (default ``tf_floor``: the drafter shipped before the grid); when none is, the best free-running one,
    flagged ``meets_floor`` False. -> one row per arch."""
    floor = tf_floor(grid) if floor is None else floor
    out = []
    for arch, rows in grid[grid.source.isin(pool)].groupby("arch"):
        ok = rows[rows.tf_dflash_tau >= floor[arch]]
        pick = (ok if len(ok) else rows).sort_values("decode_dflash_tau", ascending=False).iloc[0]
        out.append({**pick.to_dict(), "meets_floor": bool(len(ok))})
    return pd.DataFrame(out)


def ship_line(pick, floor: float, shipped_digest: str) -> str:
    """One line on a ``ship_rule`` row: its free-running and teacher-forced tau against the
    floor, and whether it is the drafter shipped now (``shipped_digest``: the shipped pair's
    drafter digest). A pick not shipped yet waits for the next recompute of every store."""
    meets = "meets" if pick.meets_floor else "misses"
    status = ("shipped" if pick.drafter_sha256 == shipped_digest else
              "not shipped yet: shipping it means rebuilding the DFlash 2 drafter and one recompute of every store")
    return (f"{pick.arch}: ship {pick.point} (free-running DFlash tau {pick.decode_dflash_tau:.2f}, teacher-forced "
            f"{pick.tf_dflash_tau:.2f}: {meets} the floor {floor:.2f}; {status})")


def pareto_front(rows: pd.DataFrame, x: str = "tf_dflash_tau", y: str = "decode_dflash_tau") -> pd.DataFrame:
    """The rows no other row beats on both ``x`` and ``y`` (higher is better), sorted by ``x``."""
    keep = [not ((rows[x] >= r[x]) & (rows[y] >= r[y]) & ((rows[x] > r[x]) | (rows[y] > r[y]))).any()
            for _, r in rows.iterrows()]
    return rows[keep].sort_values(x)


def point_label(row) -> str:
    """'0.25 x 6k' (share x thousand steps), then ' hard' / ' mixed' for those labels and
    ' 5L' for a drafter deeper or shallower than the shipped one."""
    return (f"{row['share']:g} x {row['steps'] / 1000:g}k" + ("" if row["labels"] == "soft" else f" {row['labels']}")
            + ("" if row.get("layers", DEFAULT_LAYERS) == DEFAULT_LAYERS else f" {int(row['layers'])}L"))


def point_of(row) -> GridPoint:
    """The grid point of a stored trained row."""
    return GridPoint(float(row["share"]), int(row["steps"]), row["labels"], int(row.get("layers", DEFAULT_LAYERS)))


def load_grid(path: Path = GRID_CSV) -> pd.DataFrame:
    """The stored grid (every arch), or a ``FileNotFoundError`` naming the command that makes it."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is missing: run `python scripts/drafter_grid.py --arch gdn` (and mla)")
    return pd.read_csv(path)


DISPLAY = {"heldout_tau_block8": "held-out", "decode_dflash_tau": "dflash", "decode_dflash_tau_outside_loops": "outside",
           "decode_ddtree16_tau": "ddtree16", "tf_dflash_tau": "tf dflash", "tf_ddtree64_tau": "tf ddtree64"}


# how a reader names a yardstick row's source: the grid ran before its pick shipped
SOURCE_NAMES = {"shipped": "shipped before the grid", "previous": "previous release"}


def grid_display(grid: pd.DataFrame) -> pd.DataFrame:
    """The grid for reading, best free-running first per target: target, the point as 'share x
    steps labels' (a yardstick's source in brackets, ``SOURCE_NAMES``), and the lenses' tau under
    short names (``DISPLAY``)."""
    rows = grid.sort_values(["arch", "decode_dflash_tau"], ascending=[True, False])
    return pd.concat([rows[["arch"]].rename(columns={"arch": "target"}),
                      pd.Series([point_label(r) + ("" if r["source"] == "trained"
                                                   else f" ({SOURCE_NAMES.get(r['source'], r['source'])})")
                                 for _, r in rows.iterrows()], index=rows.index, name="drafter"),
                      rows[list(DISPLAY)].rename(columns=DISPLAY)], axis=1).reset_index(drop=True)


def same_recipe_spread(grid: pd.DataFrame, column: str = "decode_dflash_tau",
                       pair: tuple = ("previous", "share0-steps3000-hard")) -> pd.Series:
    """Per target, how far apart ``column`` lies for two trainings of one recipe (the previous
    release's drafter and today's code on its recipe: rollouts only, hard labels, 3000 steps):
    grid differences below it are within what retraining alone moves. NaN without both rows."""
    rows = grid[grid.point.isin(pair)]
    return rows.groupby("arch")[column].agg(lambda x: x.max() - x.min() if len(x) == 2 else float("nan"))
