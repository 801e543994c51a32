"""``ddtree-lab`` command line (also ``python -m ddtree_lab``)."""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..common import DATA_DIR, RESULTS_DIR, ROOT
from .registry import EXPERIMENTS, by_name

MAX_BUDGET = 1024   # core.spec.MAX_BUDGET (a test holds them equal): --budgets is checked before torch loads


def _load_commands() -> None:
    """The commands' imports (``app/cli_imports.py``: torch, transformers, pandas, the lab's
    layers) as globals of this module, loaded once argparse has accepted a command, so
    ``--help``, ``--version`` and an argument error answer at once. A name already bound here
    (a test's stand-in) is kept."""
    from . import cli_imports  # late: torch and transformers take seconds to import; argparse needs neither
    for name in cli_imports.__all__:
        globals().setdefault(name, getattr(cli_imports, name))


def __getattr__(name: str):
    """``cli.run_bench`` and the commands' other imports, read from outside (a test's monkeypatch):
    loaded first (PEP 562)."""
    if not name.startswith("__"):
        _load_commands()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cmd_train_tokenizer(args):
    tok = data.train_tokenizer(data.corpus_texts()["train"], vocab_size=args.vocab_size)
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {data.TOKENIZER_PATH}")


def _cmd_train_target(args):
    out = ckpt_path(args.arch, "target", _ckpt_root(args))
    man = train_target(args.arch, args.preset, max_minutes=args.max_minutes, out=out, device=args.device)
    print(f"target: {_trained(man)}")
    runs = DATA_DIR / "runs" / f"{args.arch}-target-{args.preset}"
    print(f"wrote the target to {out} (its training state, to resume: {runs})")


def _trained(man: dict) -> str:
    """One line of a shipped model's manifest: held-out loss, tau per block (a drafter), steps, time, threads."""
    parts = [f"held-out loss {man['final_val_loss']:.3f}"] if "final_val_loss" in man else []
    parts += [f"tau {man[k]:.2f} at block {k.removeprefix('tau_block')}" for k in sorted(man)
              if k.startswith("tau_block")]
    st = man.get("train_state") or {}
    if st:
        parts.append(f"{st['step']} steps in {st['elapsed_s']:.0f} s on {man.get('threads', '?')} thread(s)")
    return ", ".join(parts) or "trained"


def _cmd_train_drafter(args):
    """The shipped pair's drafter (--arch), or one for a target of your own (--target DIR --out DIR)."""
    if (args.target is None) == (args.arch is None):
        raise SystemExit("train-drafter: give --arch (a shipped target) or --target DIR (your own), not both")
    if args.target is not None and args.out is None:
        raise SystemExit("train-drafter: --target needs --out DIR (where the drafter ships)")
    root = _ckpt_root(args)
    tdir = args.target or ckpt_path(args.arch, "target", root)
    target = load_target(tdir, device=args.device)  # first: a target the lab cannot verify is refused here
    own = {"tok": load_tokenizer_for(tdir, args.tokenizer)} if args.target else {}
    out = Path(args.out or ckpt_path(args.arch, "drafter", root))
    man = train_drafter(args.arch, args.preset, target=target, out=out, max_minutes=args.max_minutes,
                        mask_token_id=args.mask_token_id, corpus_share=args.corpus_share, steps=args.steps,
                        rollouts=args.rollouts, **own)
    print(f"drafter: {_trained(man)}")
    print(f"wrote the drafter to {out.resolve()}; {_run_state(out, args.preset)}")


def _run_state(out: Path, preset: str) -> str:
    """Where a drafter's resumable training state stays (``default_runs_dir``), said once."""
    runs = default_runs_dir(Path(out).resolve(), preset)
    return f"its training state stays in {runs} (a rerun of the same command resumes from it; delete it once the " \
           f"drafter is final)"


def _cmd_tiny_target(args):
    """A target of one's own in one command (``targets.tiny_target``), for the README's walk-through."""
    man = tiny_target(Path(args.out), minutes=args.minutes, family=args.family)
    print(f"target: {man['architecture']} of {man['parameters']:,} parameters, held-out loss "
          f"{man['final_val_loss']:.3f} after {man['steps']} steps in {man['train_time_s']:.0f} s")
    print(f"wrote the target and its tokenizer to {Path(args.out).resolve()}")


def _cmd_unlikelihood(args):
    """Unlikelihood fine-tuning of a shipped target, measured into data/results/unlikelihood.csv (issue 70)."""
    cfg = UnlikelihoodConfig(alpha=args.alpha, steps=args.steps, lr=args.lr, candidates=args.candidates)
    run_unlikelihood(args.arch, cfg, Path(args.runs_dir), ship=args.ship)


def _cmd_train_drafter2(args):
    """The shipped pair's DFlash 2 drafter (--arch), or one for a target of your own (--target DIR
    --drafter DIR --out DIR: it starts from that DFlash drafter)."""
    if (args.target is None) == (args.arch is None):
        raise SystemExit("train-drafter2: give --arch (a shipped target) or --target DIR (your own), not both")
    own = {}
    if args.target is not None:
        if args.drafter is None or args.out is None:
            raise SystemExit("train-drafter2: --target needs --drafter DIR (its DFlash drafter, the start) "
                             "and --out DIR (where the DFlash 2 drafter ships)")
        target = load_target(args.target)
        own = {"target": target, "tok": load_tokenizer_for(args.target, args.tokenizer),
               "drafter": load_drafter(Path(args.drafter), target), "out": Path(args.out)}
    man = train_drafter2(args.arch, args.preset, max_minutes=args.max_minutes, **own)
    out = own.get("out") or ckpt_path(args.arch, "drafter2")
    print(f"DFlash 2 drafter: {_trained(man)}")
    print(f"wrote the DFlash 2 drafter to {Path(out).resolve()}; {_run_state(out, args.preset)}")


def _cmd_dflash2(args):
    """The DFlash 2 study of the shipped pairs, or of --target DIR with --drafter DIR and
    --drafter2 DIR (its rows in data/results/pairs/<tag>/, never the README's stores)."""
    if args.target is None and (args.drafter or args.drafter2):
        raise SystemExit("--drafter and --drafter2 go with --target (a target directory of your own)")
    if args.target is not None and not (args.drafter and args.drafter2):
        raise SystemExit("--target needs --drafter DIR (its DFlash drafter) and --drafter2 DIR (its DFlash 2 "
                         "drafter: `ddtree-lab train-drafter2` builds one)")
    kwargs = {"dtype": _dtype(args.dtype), "device": args.device}
    drafters = ({a: load_drafters(a, **kwargs) for a in args.archs} if args.target is None else
                {(d := drafters_from_dirs(args.target, args.drafter, args.drafter2, tokenizer=args.tokenizer,
                                          **kwargs)).arch: d})
    if isinstance(args.prompts, str):
        drafters = {a: Drafters(d.arch, {k: p.with_prompts(args.prompts, args.field) for k, p in d.pairs.items()})
                    for a, d in drafters.items()}
    directory = None
    if args.target is not None or isinstance(args.prompts, str) or args.dtype != "float32":
        first = next(iter(drafters.values())).pairs["dflash"]
        name = "_".join(d.tag for d in drafters.values()) + f"-{args.dtype}"
        directory = RESULTS_DIR / "pairs" / (name + (f"-{first.prompt_source.split(':')[0]}" if first.prompt_source else ""))
    study = args.prompts if isinstance(args.prompts, int) else args.study_prompts
    run_dflash2(study_prompts=study, lossless_prompts=args.lossless_prompts, tf_problems=args.tf_problems,
                drafters=drafters, directory=directory)
    print(f"wrote the DFlash 2 study's rows to {directory or RESULTS_DIR}")


def _ckpt_root(args):
    return DATA_DIR / "checkpoints-quick" if args.preset == "quick" else CKPT_DIR


def _cmd_train_all(args):
    """Tokenizer, both targets, both drafters; finished stages (same preset) are skipped."""
    args.preset = "quick" if args.quick else "default"
    root = _ckpt_root(args)
    if args.retrain_tokenizer or not data.TOKENIZER_PATH.is_file():
        _cmd_train_tokenizer(argparse.Namespace(vocab_size=4096))
    for arch in args.archs:
        if not _finished(ckpt_path(arch, "target", root), args.preset):
            train_target(arch, args.preset, out=ckpt_path(arch, "target", root), device=args.device)
        if not _finished(ckpt_path(arch, "drafter", root), args.preset):
            train_drafter(arch, args.preset, target=load_target(ckpt_path(arch, "target", root), device=args.device),
                          out=ckpt_path(arch, "drafter", root))
    print(f"all checkpoints ready under {root}")


def _finished(path, preset) -> bool:
    """A shipped checkpoint of this preset whose files all match their hashes."""
    try:
        return check_manifest(path).get("preset") == preset
    except (FileNotFoundError, ValueError):
        return False


def _pairs(archs) -> dict:
    """{arch: Pair} of the shipped checkpoints."""
    return {arch: load_pair(arch) for arch in archs}


DTYPES = ("bfloat16", "float16", "float32")   # --dtype: torch's names


def _dtype(name: str):
    """The torch dtype of a --dtype name."""
    return getattr(torch, name)


TOKENIZER_HELP = ("with --target: the target's tokenizer, a directory of tokenizer files or a tokenizer.json "
                  "(default: the target directory's own; a target without one is refused)")


def _pair_args(s, drafter: bool = True) -> None:
    """The options of every command that decodes a pair of one's own (drafter: its --drafter)."""
    s.add_argument("--target", type=_target_dir, default=None,
                   help="a target checkpoint directory (default: the shipped pair)")
    if drafter:
        s.add_argument("--drafter", type=_drafter_dir, default=None,
                       help="a published-format DFlash drafter directory for --target")
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None, help=TOKENIZER_HELP)
    s.add_argument("--device", default=None, help="torch device of the pair, e.g. cuda (default: cpu)")
    s.add_argument("--dtype", default="float32", choices=DTYPES, help="the target's dtype")
    s.add_argument("--field", default="prompt", help="the JSON field of each line of a --prompts FILE.jsonl")


def _prompt_count_or_file(value: str):
    """--prompts: a count of HumanEval prompts (an int >= 1) or a JSON-lines file of prompts."""
    if value.isdigit():
        if int(value) < 1:
            raise argparse.ArgumentTypeError(f"must be an int >= 1 or a .jsonl file, got {value!r}")
        return int(value)
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {value} (give an int >= 1 or a .jsonl file of prompts)")
    return value


def _budget(value: str):
    """--budgets of a sweep: 'auto' or an int in [1, MAX_BUDGET] (``GenerationSpec``'s range)."""
    if value == "auto":
        return value
    return _int_in(1, MAX_BUDGET, "or 'auto'")(value)


def _int_in(low: int, high: int | None = None, alternative: str = ""):
    """The ``type=`` of an int option in [low, high] (high None: >= low); argparse names the
    option and this says the value and the range."""
    allowed = f"an int in [{low}, {high}]" if high is not None else f"an int >= {low}"

    def parse(value: str) -> int:
        try:
            x = int(value)
        except ValueError:
            x = None
        if x is None or x < low or (high is not None and x > high):
            raise argparse.ArgumentTypeError(f"must be {' '.join(filter(None, (allowed, alternative)))}, got {value!r}")
        return x
    return parse


def _finite_float(lowest: float, strict: bool = False, zero: str = ""):
    """An argparse type: a finite float >= ``lowest`` (> with ``strict``); zero: what 0 means."""
    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = float("nan")
        if not (math.isfinite(x) and (x > lowest if strict else x >= lowest)):
            note = f" ({zero})" if zero else ""
            raise argparse.ArgumentTypeError(f"must be a finite float {'>' if strict else '>='} {lowest:g}{note}, "
                                             f"got {value!r}")
        return x
    return parse


_positive_float = _finite_float(0, strict=True)            # --lr
_ul_weight = _finite_float(0, zero="0: MLE alone")          # --alpha
_non_negative_float = _finite_float(0, zero="0: greedy")    # --temperatures, --minutes


def _target_dir(value: str) -> str:
    """--target: a checkpoint directory holding config.json, checked as argparse reads it (the
    error names the command and the option, before torch loads)."""
    if not (Path(value) / "config.json").is_file():
        missing = "" if Path(value).is_dir() else " (no such directory)"
        raise argparse.ArgumentTypeError(f"{value} must be a checkpoint directory with config.json{missing}")
    return value


def _tokenizer_path(value: str) -> str:
    """--tokenizer: a tokenizer.json file or a directory (``pair.load_tokenizer_for`` checks that it
    holds tokenizer files)."""
    if not Path(value).exists():
        raise argparse.ArgumentTypeError(f"{value} must be a directory of tokenizer files or a tokenizer.json file "
                                         f"(no such file or directory)")
    return value


def _drafter_dir(value: str) -> str:
    """--drafter / --drafter2: a directory whose config.json is a DFlash drafter's
    (``drafters.check_drafter_dir``: a target's directory is refused), checked before any model
    loads; 'shipped' (compare-drafters' name of the shipped drafter) passes."""
    if value == "shipped":
        return value
    if not (Path(value) / "config.json").is_file():
        missing = "" if Path(value).is_dir() else " (no such directory)"
        raise argparse.ArgumentTypeError(f"{value} must be a DFlash drafter directory with config.json{missing}")
    from ..train.drafter_dir import check_drafter_dir  # late: light (json only, no torch), checked as argparse reads it
    try:
        check_drafter_dir(Path(value))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _unit_float(value: str) -> float:
    """--corpus-share: a float in [0, 1]."""
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"--corpus-share must be a float in [0, 1], got {value}")
    return x


def _positive_int(value: str) -> int:
    """An int >= 1 (--steps, the study's prompt counts); argparse names the option."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {value}")
    return int(value)


def _chosen_pairs(args, archs) -> tuple[dict, list[int], object]:
    """({arch: Pair}, prompt ids, results directory) of a decoding command: the shipped pairs
    on HumanEval write into data/results; a pair from directories or a prompts file writes into
    data/results/pairs/<pair tag>[-<prompts digest>]/, so the README never reads its rows."""
    if (args.target is None) != (args.drafter is None):
        raise SystemExit("--target and --drafter go together: a target directory and the drafter trained for it")
    if args.target is not None:
        pair = pair_from_dirs(args.target, args.drafter, args.tokenizer, dtype=_dtype(args.dtype), device=args.device)
        pairs = {pair.arch: pair}
    else:
        pairs = {a: load_pair(a, dtype=_dtype(args.dtype), device=args.device) for a in archs}
    own_prompts = isinstance(args.prompts, str)
    if own_prompts:
        pairs = {a: p.with_prompts(args.prompts, args.field) for a, p in pairs.items()}
    first = next(iter(pairs.values()))
    directory = RESULTS_DIR
    if args.target is not None or own_prompts or args.dtype != "float32":
        name = "_".join(p.tag for p in pairs.values()) + f"-{args.dtype}"
        directory = RESULTS_DIR / "pairs" / (name + (f"-{first.prompt_source.split(':')[0]}" if own_prompts else ""))
    return pairs, list(range(first.num_prompts if own_prompts else args.prompts)), directory


def _cmd_compare_drafters(args):
    """A/B of drafters of one target (``studies.compare_drafters``): the table, and the rows to --out."""
    if (args.target is None) == (args.arch is None):
        raise SystemExit("compare-drafters: give --arch (the shipped target) or --target DIR, not both")
    tdir = args.target or ckpt_path(args.arch, "target")
    dirs = [ckpt_path(args.arch, "drafter") if d == "shipped" and args.arch else d for d in args.drafter]
    pairs = pairs_of_one_target(tdir, dirs, args.tokenizer, dtype=_dtype(args.dtype), device=args.device)
    if isinstance(args.prompts, str):
        pairs = [p.with_prompts(args.prompts, args.field) for p in pairs]
    first = pairs[0]
    indices = range(first.num_prompts) if isinstance(args.prompts, str) else spread_prompts(args.prompts,
                                                                                          first.num_prompts)
    names = [str(d) for d in args.drafter]
    frame = compare_drafters(first.target, {n: p.drafter for n, p in zip(names, pairs)},
                             {i: first.prompt_ids(i) for i in indices}, max_new_tokens=args.max_new_tokens,
                             clock=time.thread_time if args.cpu_clock else time.perf_counter)
    table = compare_table(frame)
    print(compare_display(table).to_string(index=False))
    if args.out:
        write_timing_table(table, args.out)  # with its stamp: revision, machine, load, threads
        print(f"wrote the table to {Path(args.out).resolve()}")
    else:
        print("wrote nothing (--out FILE.csv keeps the table)")


def _cmd_quality(args):
    pairs, prompts, directory = _chosen_pairs(args, args.archs)
    args.store_path = Path(directory) / "quality.jsonl"  # run_quality's store (what Ctrl-C reports)
    run_quality(pairs, num_prompts=len(prompts), directory=directory, manifests=args.target is None)
    print(f"wrote the quality rows to {args.store_path}")


def _cmd_bench(args):
    pairs, prompts, directory = _chosen_pairs(args, ("gdn", "mla"))
    args.store_path = Path(directory) / "bench.jsonl"  # run_bench's store (what Ctrl-C reports)
    configs = len(bench_grid(tuple(pairs), max_new_tokens=args.max_new_tokens))
    print(f"bench: {configs} configs x {_count(len(prompts), 'prompt')} into {args.store_path} (an estimate "
          f"follows the first prompt; --prompts N and --max-new-tokens N shorten it)")
    run_bench(pairs, num_prompts=len(prompts), fresh=args.fresh, directory=directory,
              max_new_tokens=args.max_new_tokens, score_goals=args.target is None, wide=args.wide)
    print(f"wrote the bench rows to {args.store_path} and its table to {Path(directory) / 'bench.csv'}")


def _cmd_sweep(args):
    pairs, prompts, directory = _chosen_pairs(args, args.archs)   # --target: its own label, not --archs
    _check_block_sizes(args.block_sizes, pairs)
    grid = expand_grid(arch=list(pairs), method=args.methods, gdn_mode=args.gdn_modes, budget=args.budgets,
                       block_size=args.block_sizes, temperature=args.temperatures,
                       max_new_tokens=[args.max_new_tokens])
    store = ResultsStore(args.store, directory)
    args.store_path = store.path
    print(f"sweep: {_count(len(grid), 'config')} x {_count(len(prompts), 'prompt')} into {store.path} (an estimate "
          f"follows the first prompt)")
    frame = run_sweep(grid, prompts, store, pairs, runner=run_with_official)
    mine = grid_rows(frame, grid, prompts)
    print(summarize(mine).round(3).to_string(index=False))
    if len(frame) > len(mine):
        print(f"(the table holds this command's {len(mine)} rows; the store keeps {len(frame) - len(mine)} more of "
              f"earlier sweeps of this pair, left out)")
    print(f"wrote the sweep rows to {store.path}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _check_block_sizes(block_sizes: list[int], pairs: dict) -> None:
    """--block-sizes within every drafter's block (``generate``'s bound), before any decoding."""
    for arch, pair in pairs.items():
        most = pair.drafter.cfg.block_size
        if max(block_sizes) > most:
            raise ValueError(f"argument --block-sizes: must be ints in [2, {most}] (the {arch} drafter's block "
                             f"size), got {max(block_sizes)}")


def _cmd_concurrency(args):
    """Budget x concurrency sweep (resumable store "concurrency"; a progress bar), then its table."""
    grid = conc.GRIDS["smoke" if args.smoke else "full"]
    count = args.prompts if isinstance(args.prompts, int) else None
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in
                 (("archs", args.archs), ("concurrency", args.concurrency), ("budgets", args.budgets),
                  ("temperatures", args.temperatures), ("max_new_tokens", args.max_new_tokens),
                  ("num_prompts", count)) if v is not None}
    grid = replace(grid, **overrides)
    args.prompts = args.prompts or grid.num_prompts
    pairs, prompts, directory = _chosen_pairs(args, grid.archs)
    grid = replace(grid, archs=tuple(pairs), num_prompts=len(prompts))
    store = conc.concurrency_store(args.smoke, None if directory == RESULTS_DIR else directory)
    args.store_path = store.path
    frame = conc.run_concurrency(grid, store, pairs)
    table = conc.concurrency_table(conc.summarize_concurrency(frame))
    print(table.round(3).to_string(index=False))
    print(f"wrote the concurrency rows to {store.path}")


def _cmd_readme(args):
    tables = write_readme(args.blocks)
    pages = sorted({BLOCKS[name].page.relative_to(ROOT).as_posix() for name in tables})
    print(f"rendered {', '.join(tables)} from data/results/ into {TABLES_JSON.name}, {' and '.join(pages)}")


def _cmd_notebooks(args):
    from .notebooks import run_all  # late: nbformat takes ~3 s to import; no other command needs it
    run_all(smoke=args.smoke, only=tuple(args.numbers), jobs=args.jobs)


def _training_parser(sub, name: str, func, what: str, device: bool):
    """One training command: --arch, --preset, --max-minutes (and --device where it trains on one)."""
    s = sub.add_parser(name, help=what)
    s.add_argument("--arch", choices=["gdn", "mla"], required=name == "train-target", default=None)
    s.add_argument("--preset", choices=["default", "quick", "toy"], default="default")
    s.add_argument("--max-minutes", type=float, default=None, help="wall-clock cap")
    if device:
        s.add_argument("--device", default="cpu", help="torch device to train on, e.g. cuda (default: cpu)")
    s.set_defaults(func=func)
    return s


def _experiment(name: str):
    """A registry experiment's name (``app/registry.py``) as its ``Experiment``."""
    try:
        return by_name(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _house_parsers(sub) -> None:
    """run / show / recompute / status: the house's commands (``app/house.py``) over the registry."""
    names = ", ".join(e.name for e in EXPERIMENTS)
    s = sub.add_parser("run", help="run one experiment of the registry (resumable; `ddtree-lab show` lists them)")
    s.add_argument("name", type=_experiment, metavar="NAME", help=f"one of: {names}")
    s = sub.add_parser("show", help="an experiment's stored table and the stamp of its timings")
    s.add_argument("name", type=_experiment, nargs="?", default=None, metavar="NAME", help="none: list them")
    s = sub.add_parser("recompute", help="recompute only the named experiments' stores (old files kept until done)")
    s.add_argument("names", type=_experiment, nargs="*", metavar="NAME", help=f"of: {names}")
    s.add_argument("--all", action="store_true", help="every experiment, in the registry's order (hours)")
    s = sub.add_parser("status", help="every store: rows, revisions measured at, whether its golden sample reproduces")
    s.add_argument("--no-golden", action="store_true", help="skip recomputing the golden sample (~30 s)")
    for name in ("run", "show", "recompute", "status"):
        sub.choices[name].set_defaults(func=_cmd_house)


def _cmd_house(args):
    """The house's command ``args.cmd`` (``house.COMMANDS``)."""
    house.COMMANDS[args.cmd](args)


def _version() -> str:
    """The installed ddtree_lab's version (pyproject.toml's)."""
    try:
        return version("ddtree_lab")
    except PackageNotFoundError:   # a checkout pip never installed
        return "(not installed)"


THREADS_HELP = ("torch CPU threads, an int >= 1 (default: OMP_NUM_THREADS, else the lab's rule, "
                "ddtree_lab/core/threads.py: one thread to decode and time; the train-* commands and tiny-target: "
                "the cores not already busy)")
TRAINING = ("train-tokenizer", "train-target", "train-drafter", "train-drafter2", "train-all", "tiny-target", "unlikelihood")


def parser() -> argparse.ArgumentParser:
    """The ``ddtree-lab`` command line: one subparser per command (``func``: its handler)."""
    p = argparse.ArgumentParser(prog="ddtree-lab", description=__doc__)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--threads", type=_int_in(1), default=None, help=THREADS_HELP)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("train-tokenizer", help="train the byte-level BPE tokenizer into data/")
    s.add_argument("--vocab-size", type=int, default=4096)
    s.set_defaults(func=_cmd_train_tokenizer)
    for name, func, what, device in (
            ("train-target", _cmd_train_target, "train a target on the stdlib corpus (resumable)", True),
            ("train-drafter", _cmd_train_drafter, "train a DFlash drafter on target rollouts (resumable)", True),
            ("train-drafter2", _cmd_train_drafter2, "train a DFlash 2 drafter (selector + convolutions) from a "
                                                    "DFlash drafter (the shipped one of --arch, or --drafter with "
                                                    "--target), on the same data (resumable)", False)):
        s = _training_parser(sub, name, func, what, device)
    s = sub.choices["train-drafter2"]
    s.add_argument("--target", type=_target_dir, default=None,
                   help="a target checkpoint directory of your own (instead of --arch)")
    s.add_argument("--drafter", type=_drafter_dir, default=None, help="the DFlash drafter directory of --target (the start)")
    s.add_argument("--out", default=None, help="where the DFlash 2 drafter ships (with --target)")
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None, help=TOKENIZER_HELP)
    s = sub.choices["train-drafter"]
    s.add_argument("--target", type=_target_dir, default=None,
                   help="a target checkpoint directory of your own (instead of --arch)")
    s.add_argument("--out", default=None, help="where the drafter ships (with --target); its resumable training "
                                               "state stays beside it in OUT.run")
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None, help=TOKENIZER_HELP)
    s.add_argument("--mask-token-id", type=int, default=None, help="default: the tokenizer's <|mask|>")
    s.add_argument("--corpus-share", type=_unit_float, default=None,
                   help="share of real-code windows per batch, in [0, 1] (default: the preset's)")
    s.add_argument("--steps", type=_positive_int, default=None,
                   help="optimizer steps (default: the preset's); fewer also make that share of the preset's "
                        "rollouts and real-code windows, unless --rollouts is given")
    s.add_argument("--rollouts", type=_positive_int, default=None,
                   help="target rollouts to train on (default: the preset's, scaled by --steps)")
    s = sub.add_parser("tiny-target", help="build a tiny Qwen3ForCausalLM of your own from a transformers config, "
                                           "train it briefly on the lab's corpus and save it with its tokenizer "
                                           "(the README's walk-through)")
    s.add_argument("--out", required=True, help="the target's directory (save_pretrained layout + tokenizer files)")
    s.add_argument("--minutes", type=_non_negative_float, default=1.0,
                   help="training time on the lab's corpus (0: random weights)")
    s.add_argument("--family", default="attention", choices=("attention", "gdn", "kda", "mamba2", "short_conv"),
                   help="the layers: attention (Qwen3), or a hybrid of one recurrent family: gdn (Qwen3.5), kda "
                        "(Kimi Linear), mamba2 (Nemotron-H), short_conv (LFM2)")
    s.set_defaults(func=_cmd_tiny_target)
    s = sub.add_parser("unlikelihood", help="fine-tune a shipped target with sequence-level unlikelihood on its own "
                                             "greedy continuations (issue 70; resumable), measure its loops and "
                                             "HumanEval-solution loss into data/results/unlikelihood.csv")
    s.add_argument("--arch", choices=["gdn", "mla"], required=True)
    s.add_argument("--alpha", type=_ul_weight, default=0.5, help="weight of the unlikelihood term, >= 0")
    s.add_argument("--steps", type=_positive_int, default=250, help="optimizer steps, an int >= 1")
    s.add_argument("--lr", type=_positive_float, default=1e-4, help="AdamW learning rate, > 0")
    s.add_argument("--candidates", choices=["ngram", "lens"], default="ngram",
                   help="which continuation tokens are penalised: those completing a repeated 4-gram, or those "
                        "the lab's loop lens reads as looping")
    s.add_argument("--runs-dir", default=str(ROOT / "runs" / "unlikelihood"),
                   help="where the resumable training states live (git-ignored)")
    s.add_argument("--ship", action="store_true", help="save a target that meets the goal under "
                                                       "data/checkpoints/unlikelihood/ARCH-target")
    s.set_defaults(func=_cmd_unlikelihood)
    s = sub.add_parser("dflash2", help="DDTree over DFlash 2: the budget x temperature run, the 164-prompt "
                                        "lossless rows and the teacher-forced lens (resumable)")
    s.add_argument("--archs", nargs="+", choices=["gdn", "mla"], default=["gdn", "mla"])
    s.add_argument("--study-prompts", type=_positive_int, default=6, help="prompts of the interleaved run")
    s.add_argument("--lossless-prompts", type=_positive_int, default=164, help="prompts of the T = 0 lossless rows")
    s.add_argument("--tf-problems", type=_positive_int, default=12,
                   help="HumanEval canonical solutions of the teacher-forced lens")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=None,
                   help="FILE.jsonl: decode its prompts (--field) instead of HumanEval's; N: --study-prompts N")
    _pair_args(s)
    s.add_argument("--drafter2", type=_drafter_dir, default=None, help="a DFlash 2 drafter directory for --target")
    s.set_defaults(func=_cmd_dflash2)
    s = sub.add_parser("train-all", help="retrain tokenizer, both targets and both drafters (resumable)")
    s.add_argument("--quick", action="store_true", help="lower quality, <= 20 min, into data/checkpoints-quick")
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    s.add_argument("--retrain-tokenizer", action="store_true",
                   help="retrain data/tokenizer.json too (invalidates every checkpoint)")
    s.add_argument("--device", default="cpu", help="torch device to train on, e.g. cuda (default: cpu)")
    s.set_defaults(func=_cmd_train_all)
    s = sub.add_parser("quality", help="quality and lossless table of the shipped pairs (or --target / --drafter)")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=164,
                   help="N: HumanEval prompts 0..N-1 for the decoding checks; FILE.jsonl: its prompts (--field)")
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    _pair_args(s)
    s.set_defaults(func=_cmd_quality)
    s = sub.add_parser("bench", help="AR vs DFlash vs DDTree side by side (tokens/s, tau, speedup)")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=10,
                   help="N: HumanEval prompts 0..N-1; FILE.jsonl: its prompts (--field)")
    _pair_args(s)
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--fresh", action="store_true", help="discard earlier bench rows first")
    s.add_argument("--wide", action="store_true", help="print every column of the table (default: 10; bench.csv "
                                                      "keeps them all)")
    s.set_defaults(func=_cmd_bench)
    s = sub.add_parser("compare-drafters", help="A/B of two or more drafters of one target: tau (all rounds, "
                                                 "outside loops) and speed over AR and over the first, interleaved")
    s.add_argument("--arch", choices=["gdn", "mla"], default=None, help="the shipped target")
    s.add_argument("--drafter", action="append", required=True, type=_drafter_dir,
                   help="a drafter directory (repeat; 'shipped': the shipped one of --arch)")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=12,
                   help="N: N HumanEval prompts spread over the 164; FILE.jsonl: its prompts (--field)")
    _pair_args(s, drafter=False)
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--cpu-clock", action="store_true", help="time by this thread's CPU time (a shared machine)")
    s.add_argument("--out", default=None, help="write the table to this CSV")
    s.set_defaults(func=_cmd_compare_drafters)
    s = sub.add_parser("sweep", help="grid of decoding runs on HumanEval, into a resumable results store")
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    s.add_argument("--methods", nargs="+", default=["ar", "dflash", "ddtree"], choices=["ar", "dflash", "ddtree"])
    s.add_argument("--gdn-modes", nargs="+", default=["wy"], choices=["naive", "fork", "wy"])
    s.add_argument("--budgets", nargs="+", type=_budget, default=[1, 4, 16, 64, 256],
                   help=f"DDTree budgets: ints in [1, {MAX_BUDGET}] or auto")
    s.add_argument("--block-sizes", nargs="+", type=_int_in(2), default=[8],
                   help="drafter blocks: ints >= 2, at most the drafter's block size")
    s.add_argument("--temperatures", nargs="+", type=_non_negative_float, default=[0.0])
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--prompts", type=_prompt_count_or_file, default=10,
                   help="N: HumanEval prompts 0..N-1; FILE.jsonl: its prompts (--field)")
    s.add_argument("--store", default="sweeps", help="results store name under data/results/")
    _pair_args(s)
    s.set_defaults(func=_cmd_sweep)
    s = sub.add_parser("concurrency", help="budget x concurrency sweep of batched AR / DFlash / DDTree (resumable)")
    s.add_argument("--smoke", action="store_true", help="the seconds-long grid, into data/results/smoke/")
    s.add_argument("--archs", nargs="+", default=None, choices=["gdn", "mla"])
    s.add_argument("--concurrency", nargs="+", type=_int_in(1), default=None, help="default 1 2 4 8 16")
    s.add_argument("--budgets", nargs="+", type=_int_in(1, MAX_BUDGET), default=None,
                   help=f"T = 0 DDTree budgets, ints in [1, {MAX_BUDGET}] (auto is added)")
    s.add_argument("--temperatures", nargs="+", type=_non_negative_float, default=None, help="default 0 1")
    s.add_argument("--max-new-tokens", type=_int_in(1), default=None, help="default 64")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=None,
                   help="N: HumanEval prompts decoded at every concurrency (default 8); FILE.jsonl: its prompts")
    _pair_args(s)
    s.set_defaults(func=_cmd_concurrency)
    s = sub.add_parser("readme", help="render the result tables of README.md and docs/results.md from the stored result files")
    s.add_argument("--blocks", nargs="+", default=None, help="only these blocks (default: all)")
    s.set_defaults(func=_cmd_readme)
    s = sub.add_parser("notebooks", help="execute every notebook headless (figures -> figures/)")
    s.add_argument("--smoke", action="store_true", help="run them small (as the tests do)")
    s.add_argument("numbers", nargs="*", metavar="NN", help="only these notebooks (e.g. 02 05); default: all")
    s.add_argument("--jobs", type=_int_in(1), default=None,
                   help="notebooks run at once, each in its own kernel on one thread (default: one per core; 1 on a shared machine)")
    s.set_defaults(func=_cmd_notebooks)
    _house_parsers(sub)  # run, show, recompute, status (app/house.py)
    for s in sub.choices.values():  # also after the command: `ddtree-lab bench --threads 1`, in its --help
        s.add_argument("--threads", type=_int_in(1), default=argparse.SUPPRESS, help=THREADS_HELP)
    return p


def command(name: str, **options):
    """Run the subcommand ``name`` in this process with its defaults, ``options`` changed (by
    their dests: ``prompts=4``): what the registry's steps call (``registry.command``), the
    same handler as ``ddtree-lab NAME``."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    args = argparse.Namespace(cmd=name, threads=None)
    for action in sub._actions:
        if action.dest != "help" and action.default is not argparse.SUPPRESS:
            setattr(args, action.dest, action.default)
    vars(args).update(sub._defaults)  # func, set by set_defaults
    unknown = set(options) - set(vars(args))
    if unknown:
        raise ValueError(f"{name} has no option {sorted(unknown)}; options: {sorted(set(vars(args)) - {'cmd', 'func'})}")
    vars(args).update(options)
    _load_commands()
    return args.func(args)


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    _load_commands()
    set_threads(args.threads, "train" if args.cmd in TRAINING else "decode")  # before any model loads or timing
    _run(p, args)


class UsageError(SystemExit):
    """Exit status 2 (argparse's for a bad argument) after the one line ``ddtree-lab CMD: error: ...``;
    its str is that message, so an in-process caller (a test) can match it."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _run(p: argparse.ArgumentParser, args) -> None:
    """Run the chosen command. A ``ValueError`` / ``FileNotFoundError`` of the library (a refused
    target, a bad prompt file, a missing checkpoint) and a command's own ``SystemExit("...")``
    become one line and exit status 2, no traceback; Ctrl-C says what the command's results
    store keeps (``args.store_path``, set by the resumable commands) and exits 130."""
    try:
        args.func(args)
    except SystemExit as e:
        if isinstance(e.code, str):
            _fail(p, e.code, args.cmd)
        raise
    except (ValueError, FileNotFoundError) as e:
        _fail(p, str(e), args.cmd)
    except KeyboardInterrupt as e:
        print(_interrupted(getattr(args, "store_path", None), e), file=sys.stderr)
        raise SystemExit(130) from None


def _fail(p: argparse.ArgumentParser, message: str, cmd: str):
    """One line naming the command, as argparse's own errors of a command do: 'ddtree-lab bench:
    error: ...'."""
    message = " ".join(message.split()).removeprefix(f"{cmd}: ")  # one line; the command said once
    print(f"{p.prog} {cmd}: error: {message}", file=sys.stderr)
    raise UsageError(message) from None


def _interrupted(store_path, stop: KeyboardInterrupt | None = None) -> str:
    """The Ctrl-C line: this run's rows the store keeps and those left (``sweep.Interrupted``, the
    sweep loop's; every finished row is appended as it ends, so a rerun of the same command
    resumes after them), else the store's rows."""
    if store_path is None:  # a command without a results store, or one stopped before it had one
        return "interrupted"
    if hasattr(stop, "stored"):
        return f"interrupted: {stop} (in {store_path}); rerun the same command to resume"
    rows = ResultsStore(Path(store_path).stem, Path(store_path).parent).rows()
    return f"interrupted: {len(rows)} rows kept in {store_path}; rerun to resume"


if __name__ == "__main__":
    main()
