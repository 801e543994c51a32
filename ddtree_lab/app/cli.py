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
from .templating import texts

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
    steps = {} if args.steps is None else {"steps": args.steps}   # None: targets.TINY_STEPS
    man = tiny_target(Path(args.out), minutes=args.minutes, family=args.family, **steps)
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


def _pair_args(s, drafter: bool = True) -> None:
    """The options of every command that decodes a pair of one's own (drafter: its --drafter)."""
    s.add_argument("--target", type=_target_dir, default=None)
    if drafter:
        s.add_argument("--drafter", type=_drafter_dir, default=None)
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None)
    s.add_argument("--device", default=None)
    s.add_argument("--dtype", default="float32", choices=DTYPES)
    s.add_argument("--field", default="prompt")


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


_positive_float = _finite_float(0, strict=True)            # --lr, --minutes
_ul_weight = _finite_float(0, zero="0: MLE alone")          # --alpha
_non_negative_float = _finite_float(0, zero="0: greedy")    # --temperatures


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


def _command(sub, name: str) -> argparse.ArgumentParser:
    """The subcommand ``name`` with its line of ``ddtree-lab --help`` (templates/cli/help.toml);
    its options' texts follow from ``_helps``."""
    return sub.add_parser(name, help=texts("cli/help")[name]["help"])


def _helps(p: argparse.ArgumentParser, **values) -> None:
    """Every option's help text from templates/cli/help.toml (``templating.texts``), its ``{name}``
    fields filled from ``values``: a command's table keys its texts by option (``--budgets``) or
    positional (``name``); ``[every]``: those that read the same wherever a command has no entry
    of its own. A table or a key that names no command or option is an error (a text left behind)."""
    helps = texts("cli/help")
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {p.prog: p, **sub.choices}
    if set(helps) - {"every"} - set(parsers):
        raise ValueError(f"templates/cli/help.toml: no command {sorted(set(helps) - {'every'} - set(parsers))}")
    for cmd, s in parsers.items():
        own = {k: v for k, v in helps.get(cmd, {}).items() if k != "help"}
        actions = {a.option_strings[-1] if a.option_strings else a.dest: a for a in s._actions}
        if set(own) - set(actions):
            raise ValueError(f"templates/cli/help.toml: {cmd} has no option {sorted(set(own) - set(actions))}")
        for key, action in actions.items():
            text = own.get(key, helps["every"].get(key))
            if text is not None:
                action.help = text.format(**values)


def _training_parser(sub, name: str, func, device: bool):
    """One training command: --arch, --preset, --max-minutes (and --device where it trains on one)."""
    s = _command(sub, name)
    s.add_argument("--arch", choices=["gdn", "mla"], required=name == "train-target", default=None)
    s.add_argument("--preset", choices=["default", "quick", "toy"], default="default")
    s.add_argument("--max-minutes", type=float, default=None)
    if device:
        s.add_argument("--device", default="cpu")
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
    s = _command(sub, "run")
    s.add_argument("name", type=_experiment, metavar="NAME")
    s = _command(sub, "show")
    s.add_argument("name", type=_experiment, nargs="?", default=None, metavar="NAME")
    s = _command(sub, "recompute")
    s.add_argument("names", type=_experiment, nargs="*", metavar="NAME")
    s.add_argument("--all", action="store_true")
    s = _command(sub, "status")
    s.add_argument("--no-golden", action="store_true")
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


# the train-* commands take the idle cores; tiny-target trains on one thread (``threads``: its steps reproduce)
TRAINING = ("train-tokenizer", "train-target", "train-drafter", "train-drafter2", "train-all", "unlikelihood")


def parser() -> argparse.ArgumentParser:
    """The ``ddtree-lab`` command line: one subparser per command (``func``: its handler); the help
    texts are templates/cli/help.toml's (``_command``, ``_helps``)."""
    p = argparse.ArgumentParser(prog="ddtree-lab", description=__doc__)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--threads", type=_int_in(1), default=None)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = _command(sub, "train-tokenizer")
    s.add_argument("--vocab-size", type=int, default=4096)
    s.set_defaults(func=_cmd_train_tokenizer)
    for name, func, device in (("train-target", _cmd_train_target, True), ("train-drafter", _cmd_train_drafter, True),
                               ("train-drafter2", _cmd_train_drafter2, False)):
        s = _training_parser(sub, name, func, device)
    s = sub.choices["train-drafter2"]
    s.add_argument("--target", type=_target_dir, default=None)
    s.add_argument("--drafter", type=_drafter_dir, default=None)
    s.add_argument("--out", default=None)
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None)
    s = sub.choices["train-drafter"]
    s.add_argument("--target", type=_target_dir, default=None)
    s.add_argument("--out", default=None)
    s.add_argument("--tokenizer", type=_tokenizer_path, default=None)
    s.add_argument("--mask-token-id", type=int, default=None)
    s.add_argument("--corpus-share", type=_unit_float, default=None)
    s.add_argument("--steps", type=_positive_int, default=None)
    s.add_argument("--rollouts", type=_positive_int, default=None)
    s = _command(sub, "tiny-target")
    s.add_argument("--out", required=True)
    s.add_argument("--steps", type=_int_in(0), default=None)
    s.add_argument("--minutes", type=_positive_float, default=None)
    s.add_argument("--family", default="attention", choices=("attention", "gdn", "kda", "mamba2", "short_conv"))
    s.set_defaults(func=_cmd_tiny_target)
    s = _command(sub, "unlikelihood")
    s.add_argument("--arch", choices=["gdn", "mla"], required=True)
    s.add_argument("--alpha", type=_ul_weight, default=0.5)
    s.add_argument("--steps", type=_positive_int, default=250)
    s.add_argument("--lr", type=_positive_float, default=1e-4)
    s.add_argument("--candidates", choices=["ngram", "lens"], default="ngram")
    s.add_argument("--runs-dir", default=str(ROOT / "runs" / "unlikelihood"))
    s.add_argument("--ship", action="store_true")
    s.set_defaults(func=_cmd_unlikelihood)
    s = _command(sub, "dflash2")
    s.add_argument("--archs", nargs="+", choices=["gdn", "mla"], default=["gdn", "mla"])
    s.add_argument("--study-prompts", type=_positive_int, default=6)
    s.add_argument("--lossless-prompts", type=_positive_int, default=164)
    s.add_argument("--tf-problems", type=_positive_int, default=12)
    s.add_argument("--prompts", type=_prompt_count_or_file, default=None)
    _pair_args(s)
    s.add_argument("--drafter2", type=_drafter_dir, default=None)
    s.set_defaults(func=_cmd_dflash2)
    s = _command(sub, "train-all")
    s.add_argument("--quick", action="store_true")
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    s.add_argument("--retrain-tokenizer", action="store_true")
    s.add_argument("--device", default="cpu")
    s.set_defaults(func=_cmd_train_all)
    s = _command(sub, "quality")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=164)
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    _pair_args(s)
    s.set_defaults(func=_cmd_quality)
    s = _command(sub, "bench")
    s.add_argument("--prompts", type=_prompt_count_or_file, default=10)
    _pair_args(s)
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--fresh", action="store_true")
    s.add_argument("--wide", action="store_true")
    s.set_defaults(func=_cmd_bench)
    s = _command(sub, "compare-drafters")
    s.add_argument("--arch", choices=["gdn", "mla"], default=None)
    s.add_argument("--drafter", action="append", required=True, type=_drafter_dir)
    s.add_argument("--prompts", type=_prompt_count_or_file, default=12)
    _pair_args(s, drafter=False)
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--cpu-clock", action="store_true")
    s.add_argument("--out", default=None)
    s.set_defaults(func=_cmd_compare_drafters)
    s = _command(sub, "sweep")
    s.add_argument("--archs", nargs="+", default=["gdn", "mla"], choices=["gdn", "mla"])
    s.add_argument("--methods", nargs="+", default=["ar", "dflash", "ddtree"], choices=["ar", "dflash", "ddtree"])
    s.add_argument("--gdn-modes", nargs="+", default=["wy"], choices=["naive", "fork", "wy"])
    s.add_argument("--budgets", nargs="+", type=_budget, default=[1, 4, 16, 64, 256])
    s.add_argument("--block-sizes", nargs="+", type=_int_in(2), default=[8])
    s.add_argument("--temperatures", nargs="+", type=_non_negative_float, default=[0.0])
    s.add_argument("--max-new-tokens", type=_int_in(1), default=128)
    s.add_argument("--prompts", type=_prompt_count_or_file, default=10)
    s.add_argument("--store", default="sweeps")
    _pair_args(s)
    s.set_defaults(func=_cmd_sweep)
    s = _command(sub, "concurrency")
    s.add_argument("--smoke", action="store_true")
    s.add_argument("--archs", nargs="+", default=None, choices=["gdn", "mla"])
    s.add_argument("--concurrency", nargs="+", type=_int_in(1), default=None)
    s.add_argument("--budgets", nargs="+", type=_int_in(1, MAX_BUDGET), default=None)
    s.add_argument("--temperatures", nargs="+", type=_non_negative_float, default=None)
    s.add_argument("--max-new-tokens", type=_int_in(1), default=None)
    s.add_argument("--prompts", type=_prompt_count_or_file, default=None)
    _pair_args(s)
    s.set_defaults(func=_cmd_concurrency)
    s = _command(sub, "readme")
    s.add_argument("--blocks", nargs="+", default=None)
    s.set_defaults(func=_cmd_readme)
    s = _command(sub, "notebooks")
    s.add_argument("--smoke", action="store_true")
    s.add_argument("numbers", nargs="*", metavar="NN")
    s.add_argument("--jobs", type=_int_in(1), default=None)
    s.set_defaults(func=_cmd_notebooks)
    _house_parsers(sub)  # run, show, recompute, status (app/house.py)
    for s in sub.choices.values():  # also after the command: `ddtree-lab bench --threads 1`, in its --help
        s.add_argument("--threads", type=_int_in(1), default=argparse.SUPPRESS)
    _helps(p, names=", ".join(e.name for e in EXPERIMENTS), max_budget=MAX_BUDGET)
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
