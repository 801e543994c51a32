"""The "Reading" of a notebook agrees with its output: its numbers are rendered from the
measured tables (``app.reading``), and no committed "Reading" markdown states a number of
its own."""
import re

import nbformat
import pandas as pd
import pytest

from ddtree_lab.app.notebooks import notebook_paths
from ddtree_lab.app.reading import bf16_reading, calibration_reading

GAPS = pd.DataFrame({"arch": ["gdn", "gdn"], "group": ["rank0", "rank1+"], "predicted": [0.528, 0.038],
                     "observed": [0.742, 0.028], "count": [1092, 7178]})


def test_calibration_reading_states_the_measured_numbers():
    text = calibration_reading(GAPS, {"gdn": 1.696})
    assert "rank 0 predicted 0.53, accepted 0.74" in text and "rank 1+ predicted 4%, accepted 3%" in text
    assert "does not show" in text
    assert "1.70 x" in text and "outside 25%" in text and "underestimates" in text
    assert "within 25%" in calibration_reading(GAPS, {"gdn": 1.1})
    shows = GAPS.assign(observed=[0.742, 0.01])
    assert "(the published gap shows)" in calibration_reading(shows, {"gdn": 1.0})


def test_bf16_reading_never_says_bit_identical_when_an_error_was_measured():
    rates = pd.Series({"tree_eq_chain": 1.0, "tree_eq_ar": 0.97, "chain_eq_ar": 0.97})
    table = pd.DataFrame({"max_err": [6.25e-2], "flips": [1], "nodes": [36]}, index=["bfloat16"])
    text = bf16_reading(table, rates)
    assert "bit-identical" not in text and "6.25e-02" in text and "1 of 36 nodes" in text and "97%" in text
    assert "bit-identical" in bf16_reading(table.assign(max_err=0.0, flips=0), rates)


READINGS = [(p, c.source) for p in notebook_paths() for c in nbformat.read(p, as_version=4).cells
            if c.cell_type == "markdown" and c.source.startswith("**Reading.**")]
MEASURED = re.compile(r"\b\d+\.\d+|\b\d+(\.\d+)?\s*%|\babout \d")   # 0.8, 5%, "about 5"


@pytest.mark.parametrize("path,source", READINGS, ids=[p.stem for p, _ in READINGS])
def test_reading_markdown_states_no_number_of_its_own(path, source):
    """A measured number belongs in the output (rendered from the data), not in markdown,
    where the next run can contradict it."""
    assert not MEASURED.search(source), f"{path.name}: {MEASURED.search(source).group(0)!r} in the Reading"


def test_notebook_03_no_longer_claims_bf16_bit_identical():
    source = "\n".join(c.source for c in nbformat.read(notebook_paths()[3], as_version=4).cells)
    assert "bit-identical" not in source and "bf16_reading(" in source
