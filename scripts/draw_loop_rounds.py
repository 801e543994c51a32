"""One-off (issue 60): draw the rounds that validate the loop lens (``train/loops.py``) and
write them, unlabelled, to data/loop_labels.json. A person then reads each round (its decoded
context and block) and fills in the two labels; ``experiments/tests/test_loop_labels.py``
measures the lens against them.

Two sets, rounds uniform at random from stored rows the lens was not first designed on (its
first rules came from reading rounds of the bench store's T = 0 rows, prompts 0-9): the quality
store's T = 0 rows of prompts 10-163 (DFlash 8 and 16, DDTree-64, the reference loop) and the
bench store's T > 0 rows (DFlash and DDTree).

- "tuning" (seed 60; 60 + 12 rounds per target): labelled first, measured on the first rules,
  then used to revise the drift tolerances;
- "held_out" (seed 61; 25 + 5 rounds per target, none of the first set): drawn and labelled
  after the revision, so its precision and recall are the lens's honest ones.

    python scripts/draw_loop_rounds.py    # adds a set the file lacks; never touches a drawn one
"""
from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddtree_lab.common import RESULTS_DIR  # noqa: E402
from ddtree_lab.train.loops import LEAD, round_blocks  # noqa: E402
from ddtree_lab.train import data  # noqa: E402

OUT = ROOT / "data" / "loop_labels.json"
QUALITY = ("quality", lambda c, p: c["temperature"] == 0 and p >= 10 and c["gdn_mode"] == "wy"
           and c["method"] in ("dflash", "ddtree", "official"))
BENCH = ("bench", lambda c, p: c["temperature"] > 0 and c["method"] in ("dflash", "ddtree"))
SETS = {"tuning": (60, ((*QUALITY, 60), (*BENCH, 12))), "held_out": (61, ((*QUALITY, 25), (*BENCH, 5)))}
TAIL = 64  # decoded context tokens shown beside each round


def stored_rounds(store: str, keep) -> dict:
    """{arch: [(row, round index)]} of every round of the kept rows of a store."""
    out = {"gdn": [], "mla": []}
    for line in (RESULTS_DIR / f"{store}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if keep(row["config"], row["prompt"]):
            out[row["config"]["arch"]] += [(row, r) for r in range(len(row["metrics"]["acceptance_lengths"]))]
    return out


def entry(row: dict, r: int, store: str, tok, name: str) -> dict:
    """One drawn round: where it is stored, its token ids (the context: prompt + output so
    far; ``prompt_len`` of them the prompt's) and their decoded text, the labels to fill in."""
    prompt, tokens = data.prompt_tokens(tok, row["prompt"]), row["metrics"]["tokens"]
    committed = 1 if row["config"]["method"] == "official" else 0  # its prefill token, before its rounds
    s, e = round_blocks(tokens, row["metrics"]["acceptance_lengths"], committed)[r]
    seq, s, e = prompt + tokens, s + len(prompt), e + len(prompt)
    c = row["config"]
    return {"set": name, "store": store, "key": row["key"], "arch": c["arch"], "method": c["method"],
            "temperature": c["temperature"], "prompt": row["prompt"], "round": r, "prompt_len": len(prompt),
            "context_ids": seq[:s], "block_ids": seq[s:e], "context_tail": tok.decode(seq[max(0, s - TAIL):s]),
            "lead": tok.decode(seq[max(0, s - LEAD):s]), "block": tok.decode(seq[s:e]), "looping": None,
            "copyable": None}


def draw(name: str, tok, taken: set) -> list[dict]:
    seed, draws = SETS[name]
    rng, out = random.Random(seed), []
    for store, keep, n in draws:
        pool = stored_rounds(store, keep)
        for arch in ("gdn", "mla"):
            fresh = [(row, r) for row, r in pool[arch] if (row["key"], r) not in taken]
            out += [entry(row, r, store, tok, name) for row, r in rng.sample(fresh, n)]
    return out


def main() -> None:
    stored = json.loads(OUT.read_text()) if OUT.is_file() else {"about": [], "rounds": []}
    tok, have = data.load_tokenizer(), {r["set"] for r in stored["rounds"]}
    for name in SETS:
        if name not in have:
            stored["rounds"] += draw(name, tok, {(r["key"], r["round"]) for r in stored["rounds"]})
            print(f"drew the {name} set")
    OUT.write_text(dumps(stored))


def dumps(stored: dict) -> str:
    """The file's text: one key a line, a list of token ids on one line."""
    one_line = lambda m: "[" + ", ".join(re.findall(r"-?\d+", m.group(0))) + "]"  # noqa: E731
    return re.sub(r"\[\n\s+-?\d+(?:,\n\s+-?\d+)*\n\s+\]", one_line, json.dumps(stored, indent=1)) + "\n"


if __name__ == "__main__":
    main()
