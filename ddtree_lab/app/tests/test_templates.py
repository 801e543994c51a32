"""The notebooks' readings and claims keep their sentences in templates (issue 65 item 5).

``app/reading.py`` and ``app/claims.py`` name each template under ``app/templates/reading/`` and
``claims/`` at one call (``render("reading/...")``, or ``_said`` / ``_aimed``, which prefix
``claims/``) and pass it its numbers. Read from the source without any data: every template file
is named by a call and every name is a file, and each call passes exactly the values its template
reads (StrictUndefined fails a missing one only when that branch runs; this finds it before).
The rendered text itself is pinned by ``test_reading.py`` / ``test_claims.py`` /
``test_seed_claims.py``, which call every function of both modules.

The same over every app/*.py, cli.py's error messages aside: at most APP_PROSE_MAX characters of
prose in string literals. The command line's help texts and the registry's lines sit in TOML
files beside the templates (``templating.texts``), checked here against the code that reads them.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import jinja2
import jinja2.meta
import pytest

from ddtree_lab.app import claims, cli, registry, templating
from ddtree_lab.common import ROOT

APP = Path(__file__).resolve().parents[1]
MODULES = ("reading.py", "claims.py", "unlikelihood_report.py")
PREFIX = {"render": "", "_said": "claims/", "_aimed": "claims/"}


def template_calls() -> list[tuple[str, str, ast.Call]]:
    """(module, template name, call) for every call naming a template by a string constant."""
    calls = []
    for module in MODULES:
        for node in ast.walk(ast.parse((APP / module).read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PREFIX
                    and node.args and isinstance(node.args[0], ast.Constant)):
                calls.append((module, PREFIX[node.func.id] + node.args[0].value, node))
    return calls


def test_every_reading_and_claim_template_is_named_by_the_code():
    files = {t.removesuffix(templating.SUFFIX) for t in templating.template_files()
             if t.startswith(("reading/", "claims/"))}
    named = {name for _, name, _ in template_calls()}
    assert files, "no template under reading/ or claims/"
    assert named <= files, f"named in code, no file: {sorted(named - files)}"
    assert files <= named, f"a template no call names: {sorted(files - named)}"


def test_each_call_passes_exactly_the_values_its_template_reads():
    env = templating.environment()
    checked = 0
    for module, name, call in template_calls():
        if any(k.arg is None for k in call.keywords):   # **values: its names are not in the source
            continue
        source = env.loader.get_source(env, name + templating.SUFFIX)[0]
        reads = jinja2.meta.find_undeclared_variables(env.parse(source))
        passed = {k.arg for k in call.keywords} - ({"decided"} if call.func.id != "render" else set())
        assert passed == reads, f"{module}:{call.lineno} {name}: passes {sorted(passed - reads)} unread, " \
                                f"misses {sorted(reads - passed)}"
        checked += 1
    assert checked >= 60


def test_a_value_not_passed_is_an_error_and_a_claim_is_three_lines():
    with pytest.raises(jinja2.UndefinedError, match="'branch' is undefined"):
        templating.render("claims/ranks_ordered", rank0=0.5)
    with pytest.raises(ValueError, match="claims/leakage_clean renders 1 lines; it must render 3"):
        claims._said("leakage_clean", True)
    assert claims.ranks_ordered(0.61, 0.2) == claims.Claim(
        "the drafter's rank 0 is accepted more often than its rank 1+ branches (observed)",
        "rank 0 rate > rank 1+ rate", "0.610 vs 0.200", True)


# issue 65 item 5, templating.literal_prose: 3,972 (reading.py) and 5,008 (claims.py) before the
# templates; 0 and 1,144 after. claims.py's rest: Record's SMOKE and goal-list lines, _worded's
# error, and the K2.6 (issue 69) and unlikelihood (issue 70) claims still being written.
# unlikelihood_report.py (notebook 12's sentences): 1,161 before its findings sentences moved to
# reading/ul_findings; 796 after (the decision and the goal lines still in code).
PROSE_MAX = {"reading.py": 0, "claims.py": 1_200, "unlikelihood_report.py": 800}


@pytest.mark.parametrize("module", MODULES)
def test_readings_and_claims_keep_their_sentences_in_templates(module):
    """String literals of 40 characters or more (docstrings left out, an f-string's literal parts
    once: ``templating.literal_prose``) hold at most PROSE_MAX characters."""
    prose = templating.literal_prose((APP / module).read_text())
    print(f"{module}: {prose} characters of prose in string literals")
    assert prose <= PROSE_MAX[module]


# issue 65 item 5 over app/*.py, cli.py's error messages aside: 14,965 characters before (cli.py
# 5,386, registry.py 3,495), 6,759 after cli.py's help texts moved to templates/cli/help.toml
# (cli.py 675: its printed lines) and registry.py's lines to templates/registry/experiments.toml (0).
APP_PROSE_MAX = 10_000


def error_prose(source: str) -> int:
    """``literal_prose`` of the error messages in ``source``: the literals of every ``raise``
    statement, and of every call of ``SystemExit`` or of an ``.error`` method (argparse's
    ``parser.error``) outside one."""
    tree = ast.parse(source)
    raises = [n for n in ast.walk(tree) if isinstance(n, ast.Raise)]
    inside = {id(sub) for r in raises for sub in ast.walk(r)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and id(n) not in inside
             and (getattr(n.func, "id", None) == "SystemExit" or getattr(n.func, "attr", None) == "error")]
    return sum(templating.literal_prose(ast.unparse(n)) for n in raises + calls)


def test_the_app_keeps_its_prose_in_templates():
    """Over every app/*.py, cli.py's error messages aside, string literals of 40 characters or more
    (``templating.literal_prose``) hold at most APP_PROSE_MAX characters."""
    prose = {path.name: templating.literal_prose(path.read_text()) for path in sorted(APP.glob("*.py"))}
    errors = error_prose((APP / "cli.py").read_text())
    prose["cli.py"] -= errors
    for name, n in prose.items():
        print(f"{name}: {n}")
    print(f"total: {sum(prose.values())} (cli.py's {errors} characters of error messages aside)")
    assert sum(prose.values()) <= APP_PROSE_MAX
    assert error_prose('raise SystemExit("' + "a" * 40 + '")\np.error(f"' + "b" * 39 + '{x}")\n') == 40


def test_the_text_files_name_what_the_code_has_and_ship():
    """templates/cli/help.toml: each [every] text serves an option of some command (``cli._helps``
    refuses any other table or key that names no command or option); registry/experiments.toml:
    [what] names exactly the registry's experiments; pyproject's package-data ships every .toml."""
    p = cli.parser()
    sub = next(a for a in p._actions if a.dest == "cmd")
    options = {o for s in (p, *sub.choices.values()) for a in s._actions for o in (*a.option_strings, a.dest)}
    assert set(templating.texts("cli/help")["every"]) <= options
    assert set(templating.texts("registry/experiments")["what"]) == {e.name for e in registry.EXPERIMENTS}
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ddtree_lab.app"]
    shipped = {path for glob in data for path in templating.TEMPLATES.parent.glob(glob)}
    files = set(templating.TEMPLATES.rglob("*.toml"))
    assert len(files) == 2 and files <= shipped
