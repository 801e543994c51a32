"""The compiled-loop study's summary: ratios paired per prompt, each kind against AR of its own
kind (a compiled loop is never compared with an eager AR), and a token change shows."""
import pandas as pd
import pytest

from ddtree_lab.experiments.studies.compiled_loop import loop_display, loop_summary


def rows(equal=True):
    """6 prompts; AR eager 100 tok/s and compiled 250; DFlash eager 150 and compiled 300; the
    reference loop eager 160 and compiled 200 (prompt-dependent speeds, so pairing matters);
    unequal tokens on the last prompt when not ``equal``."""
    out = []
    for p in range(6):
        scale = 1 + p  # a prompt's own speed, shared by every config on it
        for method, eager, compiled in (("ar", 100, 250), ("dflash", 150, 300), ("official", 160, 200)):
            for kind, v in (("eager", eager), ("compiled", compiled)):
                out.append({"arch": "mla", "method": method, "budget": 1, "prompt_id": p, "kind": kind,
                            "tokens_per_s": v * scale, "tau": 2.0 if method == "dflash" else 1.0,
                            "equals_eager": equal or kind == "eager" or p < 5, "compile_s": 30.0,
                            "graph_breaks": 0, "new_graphs": 3, "threads": 1, "load_avg_1min": 1.0})
    return pd.DataFrame(out)


def test_each_kind_is_compared_with_ar_of_its_own_kind():
    t = loop_summary(rows()).set_index("method")
    assert t.loc["dflash", "compiled/eager"] == pytest.approx(2.0)
    assert t.loc["dflash", "eager/ar"] == pytest.approx(1.5)
    assert t.loc["dflash", "compiled/ar"] == pytest.approx(1.2)  # 300 / 250, not 300 / 100
    assert t.loc["ar", "compiled/eager"] == pytest.approx(2.5)
    assert t.loc["dflash", "compiled/official"] == pytest.approx(1.5)  # compiled over compiled: 300 / 200
    assert t.loc["dflash", "tau"] == pytest.approx(2.0) and t.loc["dflash", "prompts"] == 6
    assert bool(t.loc["dflash", "equals_eager"])


def test_a_changed_token_shows():
    t = loop_summary(rows(equal=False)).set_index("method")
    assert not bool(t.loc["dflash", "equals_eager"])


def test_the_compiled_loop_is_compared_with_the_compiled_reference_loop_when_it_ran():
    shown = loop_display(loop_summary(rows())).set_index("loop")
    assert shown.loc["lab DFlash", "compiled vs reference loop"].startswith("1.50x")
    assert shown.loc["AR", "compiled vs reference loop"] == "-"
    without = rows()
    shown = loop_display(loop_summary(without[without.method != "official"])).set_index("loop")
    assert shown.loc["lab DFlash", "compiled vs reference loop"] == "-"
