"""One-off migration (issue 60): give every stored decoding row the loop lens's two per-round
tags (``train/loops.py``: ``round_looping``, ``round_copyable``) and its
``ends_in_loop`` under the new lens, in place of the old ``round_in_loop`` (the last 48 context
tokens exactly periodic with a period <= 24). Nothing is decoded again: the tags are a function
of the prompt's tokens (the shipped tokenizer on the row's HumanEval prompt), the row's tokens
and its acceptance lengths. The reference loop's first token comes from its prefill, before its
rounds (``committed=1``).

Every JSON-lines store under data/results/ (committed or not: the quality, bench, sweeps,
leakage, dflash2, round_cost and concurrency stores (one entry per sequence there), a pair's
own stores under pairs/, smoke stores); a row without tokens and acceptance lengths (the
teacher-forced stores) is left as it is. A row is refused, and its store left untouched, if
its stored prompt length differs from the tokenizer's, or if it decodes prompts of its own
(``models["prompts"]``). The deterministic fields (tokens, acceptance_lengths, tree_sizes,
entropy) are checked unchanged row by row before a store is replaced (atomically; a store that
grew while it was read is read again).

bench.csv (the bench table) is rebuilt from the retagged bench store: every column but the loop
ones must come back as stored, and each row keeps its stamp.

Notebooks 06's and 08's cached per-node tables (``*calibration-*.csv.gz``: one row per draft
node per round, with the round's ``in_loop``) are retagged too, from the quality store's greedy
AR tokens (their T = 0 decodes are lossless, so their tokens are AR's) and each round's
accepted nodes; the old lens on that rebuild must give the stored column back first.

    python scripts/migrate_loop_tags.py          # idempotent: a migrated row gets the same tags
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.common import RESULTS_DIR  # noqa: E402
from ddtree_lab.train.loops import generation_tags  # noqa: E402
from ddtree_lab.train import data  # noqa: E402

KEPT = ("tokens", "acceptance_lengths", "tree_sizes", "entropy")  # must not move
PREFILL_FIRST = ("official",)  # methods whose first token comes from the prefill, before any round


class Refused(ValueError):
    pass


def prompt_ids(tok, row: dict, index: int, cache: dict) -> list[int]:
    if "prompts" in row["models"]:
        raise Refused(f"row {row['key']} decodes prompts of its own ({row['models']['prompts']}): not migrated")
    if index not in cache:
        cache[index] = data.prompt_tokens(tok, index)
    return cache[index]


def tagged(row: dict, tok, cache: dict) -> dict:
    """``row`` with the new tags (a row without a decoding is returned as it is)."""
    m = row["metrics"]
    if "tokens" not in m or "acceptance_lengths" not in m:
        return row
    committed = 1 if row["config"].get("method") in PREFILL_FIRST else 0
    if "prompts" in m:  # a concurrency group: one entry per sequence
        tags = [generation_tags(prompt_ids(tok, row, p, cache), t, a, committed)
                for p, t, a in zip(m["prompts"], m["tokens"], m["acceptance_lengths"])]
        new = {k: [t[k] for t in tags] for k in ("round_looping", "round_copyable", "ends_in_loop")}
    else:
        ids = prompt_ids(tok, row, row["prompt"], cache)
        if "prompt_len" in m and m["prompt_len"] != len(ids):
            raise Refused(f"row {row['key']}: stored prompt length {m['prompt_len']} != {len(ids)} tokens now")
        new = generation_tags(ids, m["tokens"], m["acceptance_lengths"], committed)
    metrics = {k: v for k, v in m.items() if k != "round_in_loop"} | new
    return {**row, "metrics": metrics}


def old_round_flags(context: list, tokens: list, acceptance_lengths: list) -> list[bool]:
    """The lens this replaces, one flag per round: the last 48 tokens of the context (prompt +
    output so far) periodic with a period <= 24 (used only to check a node table's rebuild)."""
    flags, done = [], 0
    for a in acceptance_lengths:
        tail = (context + tokens[:done])[-48:]
        flags.append(len(tail) == 48 and any(all(tail[i] == tail[i - p] for i in range(p, 48)) for p in range(1, 25)))
        done += a
    return flags


def greedy_tokens() -> dict:
    """{(arch, prompt): the quality store's greedy AR tokens} of the shipped pairs."""
    rows = (json.loads(line) for line in (RESULTS_DIR / "quality.jsonl").read_text().splitlines() if line.strip())
    return {(r["config"]["arch"], r["prompt"]): r["metrics"]["tokens"] for r in rows if r["config"]["method"] == "ar"}


def migrate_node_table(path: Path, tok, cache: dict, greedy: dict) -> int:
    """A cached per-node table of notebook 06 / 08 (``calibration.RoundRecorder`` rows: T = 0
    DDTree decodes of the shipped pairs, whose output is greedy AR's, so the quality store's AR
    tokens are its tokens): its ``in_loop`` retagged by the new lens. A round's acceptance length
    is its accepted nodes + the bonus. Refused unless the old lens (or, retagged already, the
    new one) on this rebuild gives the stored column back exactly. -> rounds retagged."""
    frame = pd.read_csv(path)
    keys = [k for k in ("proposal", "arch", "prompt") if k in frame]
    looping, rounds = {}, 0
    for key, g in frame.groupby(keys):
        arch, prompt = key[-2], key[-1]
        per_round = g.groupby("round").agg(acc=("accepted", "sum"), in_loop=("in_loop", "first")).sort_index()
        acc, ids, tokens = (per_round.acc + 1).tolist(), prompt_ids(tok, {"models": {}}, prompt, cache), greedy[arch, prompt]
        stored, new = per_round.in_loop.astype(bool).tolist(), generation_tags(ids, tokens, acc)["round_looping"]
        if stored != new and old_round_flags(ids, tokens, acc) != stored:
            raise Refused(f"{path.name} {key}: the rebuild gives back neither the old lens's in_loop nor the new one's")
        looping |= {(*key, r): f for r, f in zip(per_round.index, new)}
        rounds += len(acc)
    retagged = [looping[tuple(k)] for k in frame[keys + ["round"]].itertuples(index=False)]
    if retagged != frame["in_loop"].astype(bool).tolist():  # a retagged table is left byte for byte
        frame.assign(in_loop=retagged).to_csv(path, index=False)
    return rounds


def migrate_store(path: Path, tok, cache: dict) -> Counter:
    """Tag every row of one store and replace it; a Counter of rounds and tags (old and new)."""
    while True:
        text = path.read_text()
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        out = [tagged(r, tok, cache) for r in rows]
        if path.read_text() == text:  # nobody appended meanwhile
            break
    counts = Counter()
    for old, new in zip(rows, out):
        same = [json.dumps(old["metrics"].get(k)) == json.dumps(new["metrics"].get(k)) for k in KEPT]  # NaN-safe
        assert all(same), f"{path}: {old['key']} moved"
        counts["rows"] += 1
        if new is old:
            continue
        counts["tagged rows"] += 1
        for key in ("round_in_loop", "round_looping", "round_copyable"):
            flags = (old if key == "round_in_loop" else new)["metrics"].get(key) or []
            flat = [f for seq in flags for f in seq] if flags and isinstance(flags[0], list) else flags
            counts[key] += sum(flat)
            counts[f"{key} rounds"] += len(flat)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=float) + "\n" for r in out))
    tmp.replace(path)
    return counts


def migrate_bench_csv(path: Path = RESULTS_DIR / "bench.csv") -> int:
    """bench.csv (``bench.bench_table`` of the bench store's run, written by ``ddtree-lab bench``)
    rebuilt from the retagged store: every column but the loop ones must come back as stored
    (the timings are the stored rows'), the loop columns follow the new tags, the new tag
    columns join, and each row keeps the stamp it was measured under. -> rows."""
    from ddtree_lab.experiments.plumbing.results import STAMP_FIELDS, ResultsStore
    from ddtree_lab.experiments.studies.bench import bench_table
    old = pd.read_csv(path, dtype={"budget": str})
    frame = ResultsStore("bench", path.parent).frame()
    frame = frame[(frame.run == "bench") & (frame.prompt < int(old.n_prompts.max()))]
    new = bench_table(frame).astype({"budget": str})
    keys = ["arch", "method", "gdn_mode", "budget", "block_size", "temperature", "max_new_tokens", "accept_rule"]
    both = old.merge(new, on=keys, suffixes=("", "_new"), validate="one_to_one")
    if len(both) != len(old) or len(new) != len(old):
        raise Refused(f"{path.name}: the store's rows make {len(new)} configs, the table holds {len(old)}")
    for col in [c for c in old if c not in keys and c not in STAMP_FIELDS and c not in LOOP_COLUMNS]:
        a, b = both[col], both[f"{col}_new"]
        same = (a.isna() & b.isna()) | (a == b) | ((a - b).abs() <= 1e-9 * b.abs()) if a.dtype.kind == "f" else a == b
        if not same.all():
            raise Refused(f"{path.name}: column {col} does not come back from the store")
    stamps = both[keys + list(STAMP_FIELDS)]
    cols = [c for c in old if c not in STAMP_FIELDS] + [c for c in new if c not in old]
    new.merge(stamps, on=keys)[cols + list(STAMP_FIELDS)].to_csv(path, index=False)
    return len(new)


LOOP_COLUMNS = ("tau_outside_loops", "loop_round_share", "loop_prompts")  # the old lens's, recomputed


def main() -> None:
    tok, cache, greedy = data.load_tokenizer(), {}, greedy_tokens()
    for path in sorted(RESULTS_DIR.glob("*calibration-*.csv.gz")):
        try:
            print(f"{path.relative_to(ROOT)}: {migrate_node_table(path, tok, cache, greedy)} rounds retagged")
        except Refused as err:
            print(f"{path.relative_to(ROOT)}: left as it was: {err}")
    for path in sorted(RESULTS_DIR.rglob("*.jsonl")):
        try:
            c = migrate_store(path, tok, cache)
        except Refused as err:
            print(f"{path.relative_to(ROOT)}: left as it was: {err}")
            continue
        share = lambda k: f"{c[k] / c[f'{k} rounds']:.0%}" if c[f"{k} rounds"] else "-"  # noqa: E731
        print(f"{path.relative_to(ROOT)}: {c['rows']} rows, {c['tagged rows']} tagged; rounds looping "
              f"{share('round_looping')} (old lens: {share('round_in_loop')}), copyable {share('round_copyable')}")
    try:
        print(f"data/results/bench.csv: {migrate_bench_csv()} configs rebuilt from the retagged store, stamps kept")
    except Refused as err:
        print(f"data/results/bench.csv: left as it was: {err}")


if __name__ == "__main__":
    main()
