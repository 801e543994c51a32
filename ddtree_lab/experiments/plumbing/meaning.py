"""What a stored row means (the results layer): one semantics version, bumped by a person with a
dated line, and the key of a plug-in tree rule or walk.

A stored row is keyed by the models' digests, the generation spec (its config), the prompt
and ``SEMANTICS`` (``results.row_key``); never by the bytes of the lab's source. A comment, a
rename, a refactor or a faster path that leaves every token where it was changes nothing
stored. A change that moves a result (a token, an acceptance length, a tree size, an entropy)
must bump ``SEMANTICS`` here and recompute the stores it moved (``ddtree-lab recompute NAME``).
The golden check in the fast lane (``app/tests/test_golden.py``; ``ddtree-lab status``)
recomputes a fixed sample of every store and fails, naming the stores and the command, when a
change moved a result without a bump.

A researcher's own rule or walk is the one place the source counts: its key is its name plus a
hash of its definition (``plugin_key``), so rows of one's own rule never mix with, or
invalidate, the built-ins' (which are stored under their names).
"""
from __future__ import annotations

import functools
import inspect

import torch

from ...common import stable_hash


SEMANTICS = 1

# (date, version, what changed and which stores it moved): newest last; a bump appends a line
CHANGES = (
    ("2026-12-07", 1, "results keyed by meaning (models, spec, prompt, this version), no longer by a hash of "
                      "core's source; every store moved from code a4e81e3463096ec6 (measured at 4163d1d) by "
                      "scripts/migrate_semantics.py, nothing recomputed"),
)


def check_changes(changes=CHANGES, current: int = SEMANTICS) -> None:
    """Raise ValueError unless ``changes`` is dated, ends at ``current`` and counts 1, 2, ... in order."""
    versions = [v for _, v, _ in changes]
    if versions != list(range(1, len(versions) + 1)) or versions[-1] != current:
        raise ValueError(f"CHANGES must count 1..SEMANTICS ({current}) in order, one dated line a bump; got {versions}")


def plugin_key(plugin) -> str:
    """How a stored row names a tree rule or a walk (``core.rules``): a built-in by its name,
    any other by its name and ``definition_hash`` of its ``definition``."""
    if plugin.builtin:
        return plugin.name
    return f"{plugin.name}-{definition_hash(plugin.definition)}"


def definition_hash(obj) -> str:
    """12 hex digits of what defines a plug-in: its source (a function's, or its class's), its
    parameters (defaults, closure cells, a partial's arguments, an object's attributes) and the
    plain values (numbers, strings, lists of them) and same-module functions it reads as
    globals. A helper it imports from elsewhere is not part of it: rename the rule, or give it
    a parameter, when such a helper changes what it builds."""
    return stable_hash(_definition(obj, set()), 12)


def _definition(obj, seen: set):
    if id(obj) in seen:
        return "<seen>"
    seen = seen | {id(obj)}
    if isinstance(obj, functools.partial):
        return {"func": _definition(obj.func, seen), "args": _value(obj.args, seen),
                "keywords": _value(obj.keywords, seen)}
    fn = getattr(obj, "__func__", obj)  # a bound method: its function
    if inspect.isfunction(fn):
        return {"source": _source(fn), "defaults": _value(fn.__defaults__, seen),
                "kwdefaults": _value(fn.__kwdefaults__, seen),
                "closure": [_value(c.cell_contents, seen) for c in fn.__closure__ or ()],
                "globals": _globals_read(fn, seen)}
    cls = type(obj)
    state = {k: _value(v, seen) for k, v in sorted(vars(obj).items())} if hasattr(obj, "__dict__") else repr(obj)
    return {"class": _source(cls), "state": state}


def _source(obj) -> str:
    """The source text of a function or class; where Python cannot find it (code made by
    ``exec``), its bytecode and constants (a function) or its methods' (a class)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        if inspect.isclass(obj):
            return repr([(k, _source(v)) for k, v in sorted(vars(obj).items()) if inspect.isfunction(v)])
        code = obj.__code__
        return code.co_code.hex() + repr([c for c in code.co_consts if not inspect.iscode(c)])


def _globals_read(fn, seen: set) -> dict:
    """The globals ``fn`` reads that are plain values or functions of its own module."""
    out = {}
    for name in sorted(set(fn.__code__.co_names)):
        value = fn.__globals__.get(name)
        if inspect.isfunction(value) and value.__module__ == fn.__module__:
            out[name] = _definition(value, seen)
        elif _plain(value):
            out[name] = _value(value, seen)
    return out


def _plain(value) -> bool:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(map(_plain, value))
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(v) for k, v in value.items())


def _value(value, seen: set):
    """A JSON-able stand-in for a parameter value (a callable: its definition)."""
    if _plain(value):
        return value
    if isinstance(value, (list, tuple)):
        return [_value(v, seen) for v in value]
    if isinstance(value, dict):
        return {str(k): _value(v, seen) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return {"tensor": stable_hash(value.detach().cpu().contiguous().numpy().tobytes()), "shape": list(value.shape)}
    if callable(value):
        return _definition(value, seen)
    return repr(value)
