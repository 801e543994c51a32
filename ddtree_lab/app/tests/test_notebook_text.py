"""No static sentence the run can contradict (issue 26): a number in a notebook's markdown
is either a published claim (an arXiv id or "published" in the same sentence), or appears
in the run's output (rendered from it), or is a setting the code itself states. Anything
else is a number the next run can contradict. ``unattributed_numbers`` finds them in an
executed notebook; it is tested on hand-made mutants and applied to the executed copies
under data/results/executed/ when a notebook run left them there."""
from __future__ import annotations

import re

import nbformat
import pytest

from ddtree_lab.app.notebooks import EXECUTED_DIR, notebook_paths

NUMBER = re.compile(r"(?<![\w.\-])(?:(?:~|about |exactly )\s*)?-?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w.]*\w)",
                    re.IGNORECASE)
ATTRIBUTION = re.compile(r"arXiv \d{4}\.\d{4,5}|\bpublished\b|\bPR \d+|\breports?\b", re.IGNORECASE)
# numbers that name a thing, not a measurement: a section, a notebook, an issue, a paper's step
NAMING = re.compile(r"(?:section|sections|notebook|notebooks|issue|Prop\.|PR|step|steps|cell|K2\.|V|Qwen|RTX|rank|T =|T=|"
                    r"depth|budget|block|period|batch|concurrency|top-|width|#)\s*$", re.IGNORECASE)
APPROXIMATE = ("~", "about ", "exactly ")   # a quantity stated as measured: must be rendered


def _sentences(text: str) -> list[str]:
    text = re.sub(r"`[^`]*`", " ", text)                 # inline code: names and settings, not claims
    text = re.sub(r"^#+ .*$", " ", text, flags=re.MULTILINE)   # headings: "## 1 · ..."
    return [s for s in re.split(r"(?<=[.!?;])\s+|\n\s*\n|\n- ", text) if s.strip()]


def _output_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.extend(v for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def _number_in(token: str, text: str) -> bool:
    return re.search(r"(?<![\w.])" + re.escape(token) + r"(?![\d])", text) is not None


def unattributed_numbers(nb) -> list[tuple[int, str, str]]:
    """(cell index, number as written, sentence) for every number in a markdown cell that
    carries no attribution and that the run did not render. A number qualified as measured
    ("~2 min", "exactly 0", "about 5") passes only when the output says the same phrase; a
    bare number passes when it appears in an output or is written in a code cell (a setting)."""
    outputs = _output_text(nb)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for sentence in _sentences(cell.source):
            if ATTRIBUTION.search(sentence):
                continue
            for m in NUMBER.finditer(sentence):
                written = m.group(0).strip()
                if NAMING.search(sentence[:m.start()]):
                    continue
                bare = re.sub(r"^(~|about|exactly)\s*", "", written, flags=re.IGNORECASE)
                if written.lower().startswith(APPROXIMATE):
                    ok = written.lower() in outputs.lower()
                else:
                    ok = _number_in(bare, outputs) or _number_in(bare, code)
                if not ok:
                    found.append((i, written, sentence.strip()))
    return found


def _nb(markdown: str, output: str, code: str = "print(result)"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(markdown),
                nbformat.v4.new_code_cell(code, outputs=[nbformat.v4.new_output("stream", name="stdout", text=output)])]
    return nb


def test_exactly_zero_contradicted_by_the_output_is_flagged():
    nb = _nb("The rollback error is exactly 0 on the MLA target.", "mla max error 8.58e-06\n")
    assert [(w, i) for i, w, _ in unattributed_numbers(nb)] == [("exactly 0", 0)]


def test_a_number_the_output_contradicts_is_flagged():
    nb = _nb("**Expected.** float32: 1e-6 to 1e-5. The checks take ~2 min.", "float32 max err 1.05e-05\nran in 23 s\n")
    assert [w for _, w, _ in unattributed_numbers(nb)] == ["1e-6", "1e-5", "~2"]
    nb = _nb("Naive tau peaks at budget 16 and falls.", "naive tau peaks at budget 128 (tau 2.56)\n")
    assert unattributed_numbers(nb) == []          # a budget names a setting; the direction is text_test's job
    nb = _nb("Naive tau peaks at 2.31.", "naive tau peaks at budget 128 (tau 2.56)\n")
    assert [w for _, w, _ in unattributed_numbers(nb)] == ["2.31"]


def test_a_clean_notebook_passes():
    nb = _nb("## 2 · Cost\nAs published (DDTree, arXiv 2604.12989, section 5): tau 6.5 at budget 64. "
             "One report gives 22% vs 65-84%, published. The run prints its own numbers; "
             "the error is below 1e-12 here. See notebook 06 and section 4.",
             "float64 max err 2.1e-16 (< 1e-12)\n", code="BUDGET = 64")
    assert unattributed_numbers(nb) == []
    rendered = _nb("The error was exactly 0.", "the error was exactly 0 on every node\n")
    assert unattributed_numbers(rendered) == []


def test_the_committed_markdown_states_no_measured_quantity_of_its_own():
    """Without outputs only the phrases that claim a measurement can be judged: '~15 s',
    'exactly 0', 'about 5' in a committed notebook are numbers no run renders."""
    for path in notebook_paths():
        nb = nbformat.read(path, as_version=4)
        flagged = [(i, w) for i, w, _ in unattributed_numbers(nb) if w.lower().startswith(APPROXIMATE)]
        assert not flagged, f"{path.name}: {flagged}"


EXECUTED = [EXECUTED_DIR / p.name for p in notebook_paths()]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.stem)
def test_executed_notebooks_state_no_number_their_run_does_not(path):
    if not path.is_file():
        pytest.skip(f"no executed copy at {path} (run the notebook tests first: test_notebooks.py -m notebook)")
    flagged = unattributed_numbers(nbformat.read(path, as_version=4))
    assert not flagged, f"{path.name}: " + "; ".join(f"cell {i}: {w!r} in {s!r}" for i, w, s in flagged)


# ----------------------------------------------------------------------------- issue 60: questions the notebooks answer

def _markdown(number: str) -> str:
    path = next(p for p in notebook_paths() if p.name.startswith(number))
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


def test_notebook_08_asks_only_what_it_checks_about_losslessness():
    """08 asked 'does it stay lossless at T > 0?' and checked T = 0 only: it now says where the
    T > 0 check lives, and that test exists."""
    from ddtree_lab.common import ROOT
    text = _markdown("08")
    assert "stay lossless at T > 0?" not in text and "checks T = 0 only" in text
    where = re.search(r"`(ddtree_lab/core/tests/test_\w+\.py)::(test_\w+)`", text)
    assert where, "the T > 0 test is named"
    assert f"def {where.group(2)}(" in (ROOT / where.group(1)).read_text()


def test_notebook_06_attributes_22_vs_65_84_to_the_engines_measurement_only():
    """06: '22% vs 65-84%' was attached both to CaDDTree's claim and to the engines' measurement."""
    text = _markdown("06")
    caddtree = text[text.index("**Claim tested (CaDDTree"):text.index("**Second measurement")]
    engines = text[text.index("**Second measurement"):text.index("**Expected.**")]
    assert "22%" not in caddtree and "22% after a sibling vs 65-84% on the main path" in engines


# ----------------------------------------------------------------------------- issue 67: the finding on the first screen

FIRST_SCREEN = 4   # cells: the title, the parameters, the setup, the finding
FINDING_NOTEBOOKS = ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10"]   # 11, 12: add when theirs is first


def _path(number: str):
    return next(p for p in notebook_paths() if p.name.startswith(number))


def _finding_cells(nb) -> list:
    """The committed notebook's first-screen code cells that print its finding (``lab.finding``)."""
    return [c for c in nb.cells[:FIRST_SCREEN] if c.cell_type == "code" and "lab.finding(" in c.source]


@pytest.mark.parametrize("number", FINDING_NOTEBOOKS)
def test_the_finding_is_on_the_first_screen(number):
    """Answer first: one of the first four cells prints the finding (``lab.finding``, which refuses
    a sentence without a number); the question and the method come after it."""
    nb = nbformat.read(_path(number), as_version=4)
    assert _finding_cells(nb), f"{number}: no lab.finding(...) in the first {FIRST_SCREEN} cells"
    question = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "**Question.**" in c.source), None)
    assert question is None or question >= FIRST_SCREEN - 1, f"{number}: the question comes before the finding"


def test_a_finding_without_a_number_is_refused():
    from ddtree_lab.app import lab
    with pytest.raises(ValueError, match="key number"):
        lab.finding("the tree wins")


def _executed(number: str):
    """The executed copy of notebook ``number`` (``python -m ddtree_lab notebooks`` writes it); skip without one."""
    path = EXECUTED_DIR / _path(number).name
    if not path.is_file():
        pytest.skip(f"no executed copy at {path} (python -m ddtree_lab notebooks {number})")
    return nbformat.read(path, as_version=4)


@pytest.mark.slow
@pytest.mark.parametrize("number", FINDING_NOTEBOOKS)
def test_the_executed_finding_states_a_number_on_the_first_screen(number):
    committed = nbformat.read(_path(number), as_version=4)
    ids = {c.id for c in _finding_cells(committed)}
    executed = _executed(number)
    text = "\n".join(o.get("text", "") for c in executed.cells if c.get("id") in ids for o in c.get("outputs", []))
    found = re.search(r"^Finding: (.*)$", text, re.MULTILINE)
    assert found and re.search(r"\d", found.group(1)), f"{number}: no finding with a number in {text[:300]!r}"


@pytest.mark.slow
@pytest.mark.parametrize("number", FINDING_NOTEBOOKS)
def test_the_conclusion_counts_every_check_the_run_printed(number):
    """08 said '1 checks held' with two 'match: True' printed (a check_unless went uncounted)."""
    text = _output_text(_executed(number))
    held = len(re.findall(r"^  match:    True$", text, re.MULTILINE))
    skipped = len(re.findall(r"^skipped:  |^  asserted: no ", text, re.MULTILINE))
    said = re.search(r"^- (\d+) checks? held(?:, (\d+) skipped)?", text, re.MULTILINE)
    assert said, f"{number}: no check count in the conclusion"
    assert (int(said.group(1)), int(said.group(2) or 0)) == (held, skipped), said.group(0)
