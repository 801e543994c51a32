"""Sweeps: a grid over (arch, method, gdn_mode, budget, block size, temperature) x prompts,
every finished row appended to a ``ResultsStore`` (resumable, never stale). The models
come in explicitly: ``pairs = {arch: Pair}`` (``ddtree_lab.load_pair``).

A config's ``tree`` and ``accept_rule`` are a built-in's label ("unary", "conditional", None;
"rejection", "target": the names ``GenerationSpec`` looks up) or a plug-in object, a tree rule
or a walk of one's own (``core.rules``). A row is stored under ``stored_config``: the object's
``key``, its name plus a hash of its definition, so rows of one's own rule never mix with the
built-ins' (``expand_grid(..., tree=[None, my_rule])``).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

import pandas as pd
from tqdm.auto import tqdm

from ...common import pace_line
from ...core.decode import generate
from ...core.rules import TreeRule, Walk, as_rule
from ...core.spec import GenerationSpec, Sampling
from .costs import acceptance_for, cost_model
from ...train.loops import generation_tags
from .meaning import plugin_key
from .results import ResultsStore

AXES = ("arch", "method", "gdn_mode", "budget", "block_size", "temperature", "max_new_tokens", "accept_rule")
PLUGIN_AXES = ("tree",)  # optional axes: a grid has them only where asked (``expand_grid(..., tree=[...])``)


def stored_config(cfg: dict) -> dict:
    """``cfg`` as it is keyed and stored: a plug-in (a tree rule or a walk object, or a plain
    callable, read as a tree rule) by its key (``meaning.plugin_key``: a built-in's name, else
    its name plus a hash of its definition)."""
    return {k: _label(v) for k, v in cfg.items()}


def _label(value):
    if isinstance(value, (TreeRule, Walk)):
        return plugin_key(value)
    return plugin_key(as_rule(value)) if callable(value) else value


NO_TREE = ("ar", "official", "lookup")  # no tree of the lab's: no GDN mode or acceptance rule (stored as the exact one's)


def normalise(cfg: dict) -> dict:
    """Canonical config: fields a method ignores are blanked, so equal runs share a key. Every
    label is the name the loop resolves (no placeholder): gdn_mode a ``GdnMode`` name ("wy",
    the exact mode, where the target has no GDN layer or the method no tree: it changes
    nothing there), accept_rule a ``rules.ACCEPT_RULES`` name ("rejection" where nothing is
    sampled: at T = 0 every rule is the same greedy walk)."""
    cfg = dict(cfg)
    if cfg["method"] == "ar":
        cfg.update(budget=0, block_size=0)
    elif cfg["method"] in ("dflash", "official", "lookup"):
        cfg["budget"] = cfg["block_size"] - 1  # a chain: prompt lookup drafts as many tokens as DFlash's
    if cfg["method"] in ("ar", "lookup"):
        cfg.update({a: None for a in PLUGIN_AXES if a in cfg})  # no tree of the lab's
    if cfg["method"] in NO_TREE or not names_mode(cfg["arch"]):
        cfg["gdn_mode"] = EXACT_MODE  # the reference loop crops transformers' cache: no mode of the lab's
    if cfg["method"] in NO_TREE or cfg["temperature"] == 0:
        cfg["accept_rule"] = "rejection"  # one walk at T = 0; the reference loop's own rule
    return {k: cfg[k] for k in AXES + PLUGIN_AXES if k in cfg}


def with_axes(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every AXES column; a frame without ``accept_rule`` (a hand-made one, or
    T = 0 rows only) reads as "rejection" (the walk every T = 0 rule shares)."""
    return frame if "accept_rule" in frame else frame.assign(accept_rule="rejection")


def expand_grid(**axes) -> list[dict]:
    """Cartesian product of the axes (each a list), normalised and deduplicated, in order;
    ``accept_rule`` defaults to ["rejection"] (DFlash's rule, ``core.rules``). Optional
    ``tree`` (``PLUGIN_AXES``): labels or rule objects; accept_rule may hold walk objects
    (module docstring)."""
    axes = {"accept_rule": ["rejection"], **axes}
    missing = set(AXES) - set(axes)
    if missing:
        raise ValueError(f"expand_grid needs every axis {AXES}; missing {sorted(missing)}")
    names = AXES + tuple(a for a in PLUGIN_AXES if a in axes)
    seen, out = set(), []
    for combo in itertools.product(*(axes[a] for a in names)):
        cfg = normalise(dict(zip(names, combo)))
        key = tuple(stored_config(cfg).values())
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def run_config(cfg: dict, prompt_id: int, pair) -> dict:
    """Generate one (config, prompt) row with ``pair`` (a ``Pair`` of ``cfg['arch']``) and the
    lab's ``generate``; its metrics. Methods "official" (the field's reference loop) and "lookup"
    (transformers' prompt-lookup decoding) run through ``studies.official.run_with_official``, the
    runner a grid holding them passes."""
    if cfg["method"] in ("official", "lookup"):
        raise ValueError(f"method {cfg['method']!r} is not the lab's loop: run its grid with "
                         "runner=ddtree_lab.experiments.studies.official.run_with_official")
    ids = pair.prompt_ids(prompt_id)
    kwargs = {}
    if cfg["budget"] == "auto":
        measured = cost_model(pair.target, pair.drafter, cost_prompts(pair), block_size=cfg["block_size"],
                              gdn_mode=cfg["gdn_mode"])
        kwargs["cost_model"] = replace(measured, acceptance=acceptance_for(pair))  # calibrated where fitted
    g = generate(pair.target, pair.drafter, ids, spec_of(cfg, seed=prompt_id), **kwargs)
    return generation_metrics(g, ids)


def cost_prompts(pair, n: int = 2) -> list[list[int]]:
    """Token ids of the pair's last ``n`` prompts, where ``auto``'s cost model is timed: held out
    from the benches and sweeps, which take their first prompts."""
    return [pair.prompt_ids(i) for i in range(max(0, pair.num_prompts - n), pair.num_prompts)]


def generation_metrics(g, ids: list[int]) -> dict:
    """What a stored row keeps of a ``Generation`` of prompt ``ids``."""
    return {"tokens": g.tokens, "acceptance_lengths": g.acceptance_lengths, "tree_sizes": g.tree_sizes,
            "timings": g.timings, "tau": g.tau, "tokens_per_s": g.tokens_per_s,
            "rounds": len(g.acceptance_lengths), "prompt_len": len(ids),
            "entropy": sum(g.entropies) / max(1, len(g.entropies)),
            **generation_tags(ids, g.tokens, g.acceptance_lengths)}


def spec_of(cfg: dict, seed: int) -> GenerationSpec:
    """The ``GenerationSpec`` a config decodes with (the one translation from a store's labels
    to the loop's objects: sweeps and the concurrency grid alike; ``GenerationSpec`` looks a
    built-in's label up, ``core.rules``). ``tree``: a built-in's label (a DFlash 2 study's
    axis, ``dflash2.D_AXES``) or a rule object; absent: the drafter's own. ``accept_rule``: a
    label or a walk object."""
    return GenerationSpec(method=cfg["method"], budget=cfg["budget"] or 1, block_size=cfg["block_size"] or 2,
                          max_new_tokens=cfg["max_new_tokens"],
                          sampling=Sampling(cfg["temperature"], cfg.get("accept_rule", "rejection"), seed),
                          tree=cfg.get("tree"), gdn_mode=cfg["gdn_mode"])


EXACT_MODE = "wy"  # the lab's exact verification: the stored gdn_mode of every target's exact runs
ATTENTION_ONLY = ("mla", "attention")  # labels (``models.LABELS``) of targets without GDN layers: every mode verifies alike


def names_mode(arch: str) -> bool:
    """Whether the GDN mode of ``arch``'s rows says anything (False on an attention-only
    target: its rows all run ``EXACT_MODE``, and figures and tables leave the mode out)."""
    return arch not in ATTENTION_ONLY


def _check_pairs(configs: list[dict], pairs: dict) -> None:
    missing = sorted({c["arch"] for c in configs} - set(pairs))
    if missing:
        raise ValueError(f"pairs must hold a Pair (ddtree_lab.load_pair) for every arch of the grid; "
                         f"missing {missing}")
    wrong = [a for a, p in pairs.items() if p.arch != a]
    if wrong:
        raise ValueError(f"pairs[{wrong[0]!r}] is a {pairs[wrong[0]].arch!r} pair")


def run_rows(rows: list[tuple], store: ResultsStore, pairs: dict, runner, run: str = "", desc: str = "",
             *, progress: bool = True) -> None:
    """Run every (config, unit) of ``rows`` (a unit: a prompt id, or a group of prompts) not yet
    in ``store``, in the given order, and append each finished row at once:
    ``runner(cfg, unit, pair) -> metrics``. The one loop of every sweep (an interrupted run
    keeps what it finished, a rerun skips it). With ``progress``, once the first unit's rows
    are done, a line estimates the rest at their pace; a rerun says how many of ``rows`` were
    already stored (``resume_line``). Ctrl-C raises ``Interrupted``, which counts them too."""
    done = store.done_keys()
    todo = [(c, u) for c, u in rows if store.key(stored_config(c), u, pairs[c["arch"]].digests, run) not in done]
    if progress and len(todo) < len(rows):
        tqdm.write(f"{desc}: {resume_line(len(rows) - len(todo), len(todo))}")
    began, finished = time.monotonic(), 0
    try:
        for i, (cfg, unit) in enumerate(tqdm(todo, desc=desc, disable=not progress or not todo)):
            if progress and i and todo[i - 1][1] == todo[0][1] != unit:  # the first unit is done
                tqdm.write(pace_line(desc, i, len(todo), time.monotonic() - began, "rows"))
            pair = pairs[cfg["arch"]]
            store.add(stored_config(cfg), unit, runner(cfg, unit, pair), pair.digests, run)
            finished += 1
    except KeyboardInterrupt:
        raise Interrupted(len(rows) - len(todo) + finished, len(todo) - finished) from None


def resume_line(stored: int, left: int) -> str:
    """'12 of this run's rows already stored, 36 to run': a run's own rows, never the whole store's."""
    return f"{stored} of this run's rows already stored, {left} to run"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in ``run_rows``: ``stored`` of the run's rows are in the store (each appended as it
    finished), ``left`` still to run; a rerun of the same command resumes after them."""

    def __init__(self, stored: int, left: int):
        super().__init__(resume_line(stored, left))
        self.stored, self.left = stored, left


def run_sweep(configs: list[dict], prompt_ids: list[int], store: ResultsStore, pairs: dict,
              progress: bool = True, runner=run_config, *, run: str = "") -> pd.DataFrame:
    """Run every (config, prompt) of the named ``run`` not yet in ``store`` with ``pairs``
    ({arch: Pair}); returns the store's rows of that run, these pairs and the current semantics version.
    A figure that divides timings draws one run: every config of its curve, AR included,
    measured in that run's interleaved pass (rows of another run are never borrowed).

    Prompts are the outer loop, so configs compared in one run are timed side by side
    (machine noise hits them alike) and an interrupted run leaves whole prompts done.
    ``runner(cfg, prompt_id, pair) -> metrics`` (tests pass a fake one).
    """
    _check_pairs(configs, pairs)
    rows = [(c, p) for p in prompt_ids for c in configs]
    desc = f"sweep {store.path.stem} ({', '.join(getattr(p, 'tag', a) for a, p in pairs.items())})"
    run_rows(rows, store, pairs, runner, run, desc, progress=progress)
    frame = store.frame(models={a: p.digests for a, p in pairs.items()})
    return frame[frame["run"] == run].reset_index(drop=True) if len(frame) else frame


def grid_rows(frame: pd.DataFrame, configs: list[dict], prompt_ids: list) -> pd.DataFrame:
    """The rows of ``frame`` (``run_sweep``'s: every row of the store for these pairs) that
    ``configs`` on ``prompt_ids`` asked for: a table of this command's grid, not of every
    earlier sweep into the same store."""
    if frame.empty:
        return frame
    asked = {tuple(str(stored_config(c)[a]) for a in AXES) for c in configs}
    mine = [tuple(map(str, row)) in asked for row in with_axes(frame)[list(AXES)].itertuples(index=False)]
    return frame[pd.Series(mine, index=frame.index) & frame["prompt"].isin(prompt_ids)]
