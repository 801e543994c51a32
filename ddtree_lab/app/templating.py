"""Sentences in templates, numbers from code: the one Jinja2 environment of the lab's pages.

Every template sits under ``ddtree_lab/app/templates/``; ``readme/`` holds one per results block
of README.md and docs/results.md, named after the block, with the suffix ``SUFFIX`` (markdown
written through Jinja2). Code names a template without the suffix (``render("readme/corpus",
...)``) and passes numbers and tables built in Python in; the template holds the sentences.
A template file ends with a newline, as any text file does; a block is spliced into its page
without it, so ``render`` drops that one newline.

Settings: ``StrictUndefined`` (a value the code did not pass is an error naming it, never an
empty string), autoescape off (markdown, not HTML), ``trim_blocks`` and ``lstrip_blocks`` (a
line holding only a ``{% ... %}`` tag adds nothing to the output), and the filter ``fmt``:
``{{ x | fmt(".2f") }}`` is Python's ``format(x, ".2f")``, the same spec as an f-string's.
Files whose name starts with ``_`` hold macros other templates import.

Short texts looked up by key, too many for a file each (the command line's help, the registry's
lines), sit in TOML files beside the templates, ``templates/NAME.toml``, read by ``texts``
without Jinja2 (``ddtree-lab --help`` reads them and loads no template).
"""
from __future__ import annotations

import ast
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).with_name("templates")
SUFFIX = ".md.j2"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    import jinja2  # late: ~30 ms to import; `ddtree-lab --help` reads texts() and renders no template
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    return env


def fmt(value, spec: str = "") -> str:
    """The filter ``fmt``: ``format(value, spec)``. A value the code did not pass fails naming it, as
    ``{{ x }}`` does (``format`` of a StrictUndefined would raise a TypeError that names nothing)."""
    if isinstance(value, environment().undefined):
        str(value)   # StrictUndefined: UndefinedError "'x' is undefined"
    return format(value, spec)


def render(name: str, **values) -> str:
    """The template ``name`` (its path under ``templates/`` without ``SUFFIX``, e.g.
    ``"readme/corpus"``) rendered with ``values``, without the file's final newline."""
    return environment().get_template(name + SUFFIX).render(**values).removesuffix("\n")


@lru_cache(maxsize=None)
def texts(name: str) -> dict:
    """The TOML file ``templates/NAME.toml`` (``name`` e.g. ``"cli/help"``) as a dict of its
    tables: {key: text} or {table: {key: text}}. Cached: callers read it, never change it."""
    return tomllib.loads((TEMPLATES / f"{name}.toml").read_text())


def template_files() -> list[str]:
    """Every template file, as the environment names it (partials included)."""
    return sorted(p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*.j2"))


def literal_prose(source: str, minimum: int = 40) -> int:
    """Characters of prose left in a module's string literals: every literal of at least
    ``minimum`` characters, docstrings left out; an f-string (implicit concatenation joined, as
    Python joins it) counts its literal parts once, its ``{...}`` fields not at all."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    inside = {id(sub) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for sub in ast.walk(n) if sub is not n}
    sizes = [len(n.value) if isinstance(n, ast.Constant) else sum(len(v.value) for v in n.values
                                                                   if isinstance(v, ast.Constant))
             for n in ast.walk(tree) if id(n) not in docs | inside
             and (isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant) and isinstance(n.value, str))]
    return sum(n for n in sizes if n >= minimum)
