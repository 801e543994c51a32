"""``load_pair(arch)``: a target, the drafter trained for it and the tokenizer, checked, as
one frozen ``Pair`` that carries the digests of both models' weights.

Everything downstream (sweeps, results stores, widgets) receives the pair explicitly; its
digests go into every stored row's key, so rows of different models never mix.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from transformers import AutoTokenizer

from . import data
from ..common import stable_hash
from .data import humaneval_prompts, load_prompt_file, prompt_tokens
from .checkpoints import CKPT_DIR, REBUILD, check_manifest, ckpt_path
from .drafters import drafter_digest, load_drafter
from .rollouts import target_digest
from ..core.models import ARCHS, LABELS, arch_of, load_target


@dataclass(frozen=True, eq=False)
class Pair:
    """target (a transformers causal LM), drafter (``DFlashDrafter``: a ``dflash``
    ``DFlashDraftModel`` on the target's embedding and head), tokenizer, arch
    ('gdn' / 'mla') and the sha256 digests of the target's and the drafter's weights.
    Unpacks as ``target, drafter, tokenizer = pair``."""
    arch: str
    target: object
    drafter: object
    tokenizer: object
    target_digest: str
    drafter_digest: str
    prompt_set: tuple = ()  # the pair's own prompts (``with_prompts``); empty: HumanEval
    prompt_source: str = ""  # "<file sha256>:<field>" of ``prompt_set``

    def __iter__(self):
        return iter((self.target, self.drafter, self.tokenizer))

    @property
    def tag(self) -> str:
        """Short name of the exact models: '{arch}-{target digest[:8]}-{drafter digest[:8]}'."""
        return f"{self.arch}-{self.target_digest[:8]}-{self.drafter_digest[:8]}"

    @property
    def digests(self) -> dict:
        """{'target': sha256, 'drafter': sha256} (+ 'prompts': the prompt file's digest and field
        when the pair decodes its own prompts): what a results row records, so rows of other
        models or prompts never mix."""
        out = {"target": self.target_digest, "drafter": self.drafter_digest}
        return out | ({"prompts": self.prompt_source} if self.prompt_set else {})

    @property
    def num_prompts(self) -> int:
        return len(self.prompt_set) if self.prompt_set else len(humaneval_prompts())

    def prompt_ids(self, index: int) -> list[int]:
        """Token ids of prompt ``index`` of the pair's prompts (HumanEval by default)."""
        if not self.prompt_set:
            return prompt_tokens(self.tokenizer, index)
        if not 0 <= index < len(self.prompt_set):
            raise ValueError(f"prompt index must be in [0, {len(self.prompt_set)}), got {index}")
        return self.tokenizer.encode(self.prompt_set[index]).ids

    def with_prompts(self, path, field: str) -> "Pair":
        """This pair decoding the prompts of a JSON-lines file's ``field`` (``data.load_prompt_file``)."""
        texts = tuple(load_prompt_file(path, field))
        return replace(self, prompt_set=texts, prompt_source=f"{stable_hash(list(texts), 16)}:{field}")


DRAFTERS = {"dflash": "drafter", "dflash2": "drafter2"}  # drafter= -> the shipped checkpoint's kind


def load_pair(arch: str, target_path: Path | str | None = None, drafter_path: Path | str | None = None,
              *, drafter: str = "dflash", root: Path = CKPT_DIR, tokenizer: Path | str | None = None,
              **target_kwargs) -> Pair:
    """The ``Pair`` for ``arch`` in {'gdn', 'mla'}: the shipped checkpoints under ``root``, or
    ``target_path`` / ``drafter_path`` (local checkpoint directories, e.g. a real Qwen3.6, Kimi
    or (arch 'attention') Qwen3 / Llama checkpoint and a drafter trained for it; ``target_kwargs`` go to ``load_target``,
    e.g. ``dtype=torch.bfloat16, device_map="auto"``).

    ``drafter_path`` is any published-format DFlash directory (``config.json`` + safetensors,
    with or without the lab's manifest). The tokenizer: ``tokenizer`` (a directory of tokenizer
    files, or a tokenizer.json) when given, else the target directory's own (``load_tokenizer_for``:
    a directory without one is a ``ValueError``). Every manifest-listed file's sha256 is
    checked, a drafter whose manifest names its target must have been trained for exactly this
    target, and a drafter that does not fit the target (hidden size, vocabulary, target layers,
    mask id) is a ``ValueError`` naming the field and both values.

    drafter: which shipped drafter (without ``drafter_path``): "dflash" (``DFlashDraftModel``)
    or "dflash2" (``DFlash2DraftModel``, its candidate selector drafts conditional trees).
    """
    if arch not in (ARCHS if target_path is None else LABELS):
        raise ValueError(f"arch must be one of {ARCHS} (with target_path: {LABELS}), got {arch!r}")
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {tuple(DRAFTERS)}, got {drafter!r}")
    kind = DRAFTERS[drafter]
    tpath = Path(target_path or ckpt_path(arch, "target", root))
    if target_path is None:
        check_manifest(tpath, REBUILD["target"].format(arch=arch))
    target = load_target(tpath, **target_kwargs)
    if arch_of(target) != arch:
        raise ValueError(f"{tpath} holds a {arch_of(target)!r} model, expected {arch!r}")
    dpath = Path(drafter_path or ckpt_path(arch, kind, root))
    return _pair(arch, target, tpath, dpath, kind, shipped=drafter_path is None, tokenizer=tokenizer)


def _pair(arch: str, target, tpath: Path, dpath: Path, kind: str, shipped: bool, tokenizer=None) -> Pair:
    """The checked ``Pair`` of a loaded target and the drafter directory ``dpath`` (its
    tokenizer first: ``load_tokenizer_for(tpath, tokenizer)``)."""
    tok = load_tokenizer_for(tpath, tokenizer)
    tdigest = target_digest(target)
    # a drafter of one's own is rebuilt into a fresh directory: the run state beside ``dpath``
    # (``default_runs_dir``) is another target's, which training refuses to resume
    rebuild = rebuild_command(kind, arch, shipped, tpath, dpath.with_name(f"{dpath.name}-for-{tdigest[:8]}"),
                              tokenizer)
    drafter = load_drafter(dpath, target, rebuild=rebuild if shipped else "")
    manifest = dpath / "manifest.json"
    trained_for = json.loads(manifest.read_text()).get("target_sha256") if manifest.is_file() else None
    if trained_for not in (None, tdigest):
        raise ValueError(f"{dpath} was trained for another target than {tpath}; "
                         f"{'rebuild it' if shipped else 'train one for this target'} with `{rebuild}`")
    return Pair(arch, target, drafter, tok, tdigest, drafter_digest(drafter))


def rebuild_command(kind: str, arch: str, shipped: bool, tpath: Path, out: Path, tokenizer=None) -> str:
    """The command that builds a drafter (kind 'drafter' or 'drafter2') for the target at
    ``tpath``: the shipped pair's (``REBUILD``, by arch), else the own-target form into ``out``
    (``train-drafter --target --out``, with ``--tokenizer`` when one was given; arch
    'attention' has no shipped recipe to name)."""
    if shipped:
        return REBUILD[kind].format(arch=arch)
    t, o = shlex.quote(str(tpath)), shlex.quote(str(out))
    tok = f" --tokenizer {shlex.quote(str(tokenizer))}" if tokenizer else ""
    if kind == "drafter":
        return f"ddtree-lab train-drafter --target {t} --out {o}{tok}"
    return f"ddtree-lab train-drafter2 --target {t} --drafter DFLASH_DRAFTER_DIR --out {o}{tok}"


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def load_tokenizer_for(target_path: Path, tokenizer: Path | str | None = None):
    """The target's tokenizer (a ``tokenizers.Tokenizer``): ``tokenizer`` when given (a
    directory of tokenizer files, or a tokenizer.json file), else the target directory's own
    (``AutoTokenizer``, its ``tokenizers`` backend): the shipped and lab-trained targets hold
    theirs too. A directory without tokenizer files is a ``ValueError``, with no exception:
    another model's tokenizer would decode wrong tokens without a sign."""
    if tokenizer is not None:
        return _tokenizer_at(Path(tokenizer))
    target_path = Path(target_path)
    if any((target_path / f).is_file() for f in TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(target_path).backend_tokenizer
    raise ValueError(f"{target_path} holds no tokenizer ({' or '.join(TOKENIZER_FILES)}): pass --tokenizer DIR "
                     f"(Python: tokenizer=DIR), a directory with the target's tokenizer files, or a tokenizer.json")


def _tokenizer_at(path: Path):
    """The tokenizer of a tokenizer.json file or of a directory of tokenizer files."""
    if path.is_file():
        return data.load_tokenizer(path)
    if any((path / f).is_file() for f in TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(path).backend_tokenizer
    raise ValueError(f"--tokenizer must be a directory with {' or '.join(TOKENIZER_FILES)}, or a tokenizer.json "
                     f"file, got {path}")


def pair_from_dirs(target_dir, drafter_dir, tokenizer=None, **target_kwargs) -> Pair:
    """The ``Pair`` of a target directory and a drafter directory: its arch read from the
    target (``models.arch_of``), then ``load_pair``'s checks. tokenizer: ``load_tokenizer_for``'s.
    ``target_kwargs``: ``load_target``'s (``dtype``, ``device``, ``device_map``)."""
    target = load_target(Path(target_dir), **target_kwargs)
    return _pair(arch_of(target), target, Path(target_dir), Path(drafter_dir), "drafter", shipped=False,
                 tokenizer=tokenizer)


def pairs_of_one_target(target_dir, drafter_dirs, tokenizer=None, **target_kwargs) -> list[Pair]:
    """One ``Pair`` per drafter directory, all on one target loaded once from ``target_dir``
    (``load_pair``'s checks on each drafter): the drafters an A/B compares."""
    target = load_target(Path(target_dir), **target_kwargs)
    return [_pair(arch_of(target), target, Path(target_dir), Path(d), "drafter", shipped=False, tokenizer=tokenizer)
            for d in drafter_dirs]

