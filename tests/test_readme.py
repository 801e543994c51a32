"""Every number in the README's result tables is read from a stored file.

The README's ``<!-- results:NAME -->`` blocks must equal ``data/results/readme_tables.json``,
which must equal what ``experiments.readme`` renders from the stored result files today;
no markdown table outside those blocks holds a number; the README's Python example runs.
"""
import json
import re

import pytest

from ddtree_lab.common import ROOT
from ddtree_lab.experiments import readme

NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
TEXT = readme.README.read_text()


def numbers(markdown: str) -> list[float]:
    """Every number in a markdown text, in order (code spans in backticks left out)."""
    return [float(x) for x in NUMBER.findall(re.sub(r"`[^`]*`", "", markdown))]


def test_readme_has_every_block():
    assert sorted(readme.readme_blocks(TEXT)) == sorted(readme.BLOCKS)


@pytest.mark.parametrize("name", sorted(readme.BLOCKS))
def test_readme_block_is_the_stored_table(name):
    stored = json.loads(readme.TABLES_JSON.read_text())[name]
    block = readme.readme_blocks(TEXT)[name]
    print(f"{name}: {len(numbers(block))} numbers, from {stored['sources']} (`{stored['command']}`)")
    assert numbers(block) == numbers(stored["markdown"]) and numbers(block)
    assert block == stored["markdown"], f"README block {name!r} is stale: run `ddtree-lab readme`"


@pytest.mark.parametrize("name", sorted(readme.BLOCKS))
def test_stored_table_is_rendered_from_the_result_files(name):
    for source in readme.BLOCKS[name].sources:
        assert (ROOT / source).exists(), f"{source} is missing: run `{readme.BLOCKS[name].command}`"
    stored = json.loads(readme.TABLES_JSON.read_text())[name]
    assert stored["markdown"] == readme.BLOCKS[name].render(), (
        f"{readme.TABLES_JSON.name} is stale for {name!r}: run `ddtree-lab readme`")


def test_no_table_outside_the_blocks_holds_a_number():
    outside = re.sub(r"<!-- results:(\w+) -->.*?<!-- /results:\1 -->", "", TEXT, flags=re.S)
    rows = [line for line in outside.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    bad = [line for line in rows if numbers(line)]
    assert rows and not bad, "\n".join(bad)


def test_numbers_parse():
    assert numbers("| 4.32M / 4.32M | 3.2e-14 | **1.84x** | 164/164 | `00_quickstart` |") == \
        [4.32, 4.32, 3.2e-14, 1.84, 164, 164]


def test_splice_replaces_only_the_block():
    text = "a\n<!-- results:speed -->\nold\n<!-- /results:speed -->\nb"
    assert readme.splice(text, {"speed": {"markdown": "new"}}) == \
        "a\n<!-- results:speed -->\nnew\n<!-- /results:speed -->\nb"
    with pytest.raises(ValueError, match="no <!-- results:quality"):
        readme.splice(text, {"quality": {"markdown": "x"}})


def test_the_readme_python_example_runs():
    code = re.search(r"```python\n(.*?)```", TEXT, re.S).group(1)
    assert "from ddtree_lab import load_pair, generate" in code
    exec(compile(code.replace('budget=16', 'budget=16, max_new_tokens=8'), "README.md", "exec"), {})
