"""Imports sit at the top of their module wherever the layer allows it (read with ``ast``).

An import inside a function (a "late" import) hides a dependency and pays its cost at an odd
moment. The few that remain say why on the line, ``# late: <reason>`` (an optional or heavy
dependency only one command needs, a real import cycle). The package holds at most
``MAX_LATE`` of them, and a late import without a reason fails (``CORE_ALLOWANCE``, the
list of exceptions, is empty).
"""
import ast
import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass

from ddtree_lab.common import ROOT

PACKAGE = ROOT / "ddtree_lab"
MAX_LATE = 10
REASON = re.compile(r"#\s*late:\s*\S")

# (file under ddtree_lab/, enclosing function): late imports allowed without a reason comment,
# one entry per import. Empty: every core import sits at the top of its module now.
CORE_ALLOWANCE = Counter()


@dataclass(frozen=True)
class LateImport:
    file: str
    function: str  # qualified: Class.method, outer.inner
    line: int
    documented: bool  # a ``# late: <reason>`` comment on one of its lines


def late_imports(source: str, file: str = "<string>") -> list[LateImport]:
    """Every import statement inside a function body of ``source``, in line order."""
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    out = []

    def visit(node, scope: tuple[str, ...], in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, scope + (child.name,), True)
            elif isinstance(child, ast.ClassDef):
                visit(child, scope + (child.name,), in_function)
            elif isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                lines = range(child.lineno, child.end_lineno + 1)
                out.append(LateImport(file, ".".join(scope), child.lineno,
                                      any(REASON.search(comments.get(n, "")) for n in lines)))
            else:
                visit(child, scope, in_function)

    visit(ast.parse(source), (), False)
    return sorted(out, key=lambda i: i.line)


def package_late_imports() -> list[LateImport]:
    return [i for path in sorted(PACKAGE.rglob("*.py")) if "tests" not in path.relative_to(PACKAGE).parts
            for i in late_imports(path.read_text(), path.relative_to(PACKAGE).as_posix())]


def unexplained(imports: list[LateImport], allowance: Counter = CORE_ALLOWANCE) -> list[LateImport]:
    """The late imports without a ``# late:`` reason, less those ``allowance`` still covers."""
    left, out = Counter(allowance), []
    for i in imports:
        if i.documented:
            continue
        if left[i.file, i.function] > 0:
            left[i.file, i.function] -= 1
        else:
            out.append(i)
    return out


LATE = package_late_imports()


def test_the_imports_are_read():
    assert len(list(PACKAGE.rglob("*.py"))) > 30
    assert sum(CORE_ALLOWANCE.values()) == 0  # no late import in core/


def test_few_late_imports():
    where = [f"{i.file}:{i.line} ({i.function})" for i in LATE]
    assert len(LATE) <= MAX_LATE, f"{len(LATE)} imports inside functions (at most {MAX_LATE}): {where}"


def test_every_late_import_says_why():
    bad = [f"{i.file}:{i.line} ({i.function})" for i in unexplained(LATE)]
    assert not bad, f"imports inside functions without a '# late: <reason>' comment (move them to the top): {bad}"


def test_the_core_allowance_is_still_needed():
    """An allowance whose import has moved to the top (or got its comment) is taken out."""
    used = Counter((i.file, i.function) for i in LATE if not i.documented)
    stale = sorted(k for k, n in CORE_ALLOWANCE.items() if used[k] < n)
    assert not stale, f"CORE_ALLOWANCE lists late imports that are gone: {stale}"


MUTANT = '''\
import json


def top():
    return json.dumps({})


class Box:
    def method(self):
        from os import path  # late: a documented one
        return path

    def other(self):
        import sys
        return sys


def outer():
    def inner():
        from collections import (
            OrderedDict,  # late: the reason on a continuation line
        )
        return OrderedDict
    import re
    return inner, re
'''


def test_a_mutant_is_counted_and_flagged():
    found = late_imports(MUTANT, "core/mutant.py")
    assert [(i.function, i.line, i.documented) for i in found] == [
        ("Box.method", 10, True), ("Box.other", 14, False), ("outer.inner", 20, True), ("outer", 24, False)]
    assert [(i.function, i.line) for i in unexplained(found)] == [("Box.other", 14), ("outer", 24)]
    # an allowance covers one import of its function, not a second one, nor another file's
    assert [i.function for i in unexplained(found, Counter({("core/mutant.py", "Box.other"): 1}))] == ["outer"]
    assert len(unexplained(found, Counter({("core/other.py", "Box.other"): 1}))) == 2
    # a bare '# late:' gives no reason
    assert not late_imports("def f():\n    import os  # late:\n", "x.py")[0].documented
    # a second undocumented import in an allowed core function fails
    twice = [LateImport("core/verify.py", "prefill", n, False) for n in (1, 2)]
    assert [i.line for i in unexplained(twice, Counter({("core/verify.py", "prefill"): 1}))] == [2]


def test_the_package_loads_its_api_on_first_use():
    """``import ddtree_lab`` loads no torch (the CLI's ``--help`` answers at once); every name of
    ``__all__`` is there on first use (PEP 562), the very object of its module."""
    code = ("import sys, ddtree_lab\n"
            "print(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))\n"
            "from ddtree_lab import *\n"
            "from ddtree_lab.core import decode, naive as naive_module\n"
            "assert generate is decode.generate and naive is naive_module and 'load_pair' in dir(ddtree_lab)\n"
            "print(sorted(n for n in ddtree_lab.__all__ if n not in globals()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]"]
