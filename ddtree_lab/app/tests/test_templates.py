"""The notebooks' readings and claims keep their sentences in templates (issue 65 item 5).

``app/reading.py`` and ``app/claims.py`` name each template under ``app/templates/reading/`` and
``claims/`` at one call (``render("reading/...")``, or ``_said`` / ``_aimed``, which prefix
``claims/``) and pass it its numbers. Read from the source without any data: every template file
is named by a call and every name is a file, and each call passes exactly the values its template
reads (StrictUndefined fails a missing one only when that branch runs; this finds it before).
The rendered text itself is pinned by ``test_reading.py`` / ``test_claims.py`` /
``test_seed_claims.py``, which call every function of both modules.
"""
from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import jinja2.meta
import pytest

from ddtree_lab.app import claims, templating

APP = Path(__file__).resolve().parents[1]
MODULES = ("reading.py", "claims.py")
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
PROSE_MAX = {"reading.py": 0, "claims.py": 1_200}


@pytest.mark.parametrize("module", MODULES)
def test_readings_and_claims_keep_their_sentences_in_templates(module):
    """String literals of 40 characters or more (docstrings left out, an f-string's literal parts
    once: ``templating.literal_prose``) hold at most PROSE_MAX characters."""
    prose = templating.literal_prose((APP / module).read_text())
    print(f"{module}: {prose} characters of prose in string literals")
    assert prose <= PROSE_MAX[module]
