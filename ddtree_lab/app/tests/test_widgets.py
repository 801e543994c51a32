"""widgets.py: the explorer's plain functions (spec, select, render) and its wiring, with
no browser: setting a control's value must redraw the Output."""
import ipywidgets as w
import pandas
import pytest
from matplotlib.figure import Figure

from ddtree_lab import load_pair
from ddtree_lab.core.rules import from_rank_paths
from ddtree_lab.experiments.plumbing.summary import summarize
from ddtree_lab.app import widgets
from helpers import results_frame


@pytest.fixture(scope="module")
def frame():
    return results_frame()


def _curve_x(fig, label):
    """x data of the line labelled ``label`` in the figure's first panel."""
    (line,) = [l for l in fig.axes[0].lines if l.get_label() == label]
    return [int(x) for x in line.get_xdata()]


def test_controls_spec(frame):
    spec = widgets.sweep_controls_spec(frame)
    assert spec["arch"] == ["gdn", "mla"]
    assert spec["gdn_mode"] == ["all", "naive", "wy"]
    assert spec["block_size"] == [4] and spec["temperature"] == [0.0, 1.0] and spec["max_new_tokens"] == [8]
    assert spec["prompt"] == ["all", 0, 1, 2]
    assert spec["budgets"] == [1, 3, 7, 15] and spec["budget"] == (1, 15)
    assert widgets.sweep_controls_spec(summarize(frame))["prompt"] == ["all"]
    mla = widgets.sweep_controls_spec(frame, "mla")
    assert mla["arch"] == ["gdn", "mla"] and mla["gdn_mode"] == ["all"] and mla["temperature"] == [0.0]


def test_explorer_defaults(frame):
    chosen = widgets.explorer_defaults(frame, "gdn", gdn_mode="wy", block_size={"gdn": 4, "mla": 8}, temperature=0.0)
    assert chosen == {"arch": "gdn", "prompt": "all", "budget_range": (1, 15), "gdn_mode": "wy",
                      "temperature": 0.0, "max_new_tokens": 8, "block_size": 4}
    assert widgets.explorer_defaults(frame, "mla", gdn_mode="wy", block_size={"mla": 8})["gdn_mode"] == "all"
    assert widgets.explorer_defaults(frame, "mla", block_size={"mla": 8})["block_size"] == 4  # not stored: most common


def test_title_says_the_selection(frame):
    fig = widgets.render(frame, arch="gdn", gdn_mode="wy", block_size=4, temperature=0.0, budget_range=(3, 7),
                         prompt=1, max_new_tokens=8)
    assert fig.get_suptitle() == "gdn · wy · block 4 · T = 0.0 · 8 new tokens · prompt 1 · budgets 3-7"
    assert widgets.title("mla", "all", prompt="all") == "mla · all prompts"


def test_select_filters(frame):
    rows = widgets.select(frame, "gdn", "wy", 4, 0.0, (3, 7))
    assert set(rows["arch"]) == {"gdn"} and set(rows["temperature"]) == {0.0}
    assert set(rows["gdn_mode"]) == {"wy"} and (rows["method"] == "ar").any()  # AR stays
    ddtree = rows[rows["method"] == "ddtree"]
    assert list(ddtree["budget"]) == [3, 7, "auto"]  # auto is never cut by the range
    assert set(rows["method"]) == {"ar", "dflash", "ddtree"}
    everything = widgets.select(frame, "gdn", "all", None, 0.0, None)
    assert len(everything) == 1 + 2 + 8 + 1
    same = widgets.select(summarize(frame), "gdn", "wy", 4, 0.0, (3, 7))
    assert same.drop(columns=["n_prompts"]).equals(rows.drop(columns=["n_prompts"]))


def test_select_one_prompt(frame):
    rows = widgets.select(frame, "gdn", "naive", 4, 0.0, None, prompt=1)
    bad = rows[(rows["method"] == "ddtree") & (rows["budget"] == 15)].iloc[0]
    assert bad["n_prompts"] == 1 and bad["matches_ar"] == 0.0 and bad["first_divergence"] == 5
    mla = widgets.select(frame, "mla", "all", 4, 0.0, None, prompt=1)
    assert mla[mla["method"] == "ar"]["tokens_per_s"].iloc[0] == pytest.approx(4.0)  # 8 tokens / 2 s
    with pytest.raises(ValueError, match="raw results frame"):
        widgets.select(summarize(frame), "gdn", "all", 4, 0.0, None, prompt=1)


def test_render_follows_budget_range(frame):
    wide = widgets.render(frame, arch="gdn", gdn_mode="wy", block_size=4, temperature=0.0, budget_range=(1, 15))
    narrow = widgets.render(frame, arch="gdn", gdn_mode="wy", block_size=4, temperature=0.0, budget_range=(3, 7))
    assert isinstance(wide, Figure)
    assert _curve_x(wide, "ddtree wy") == [1, 3, 7, 15]
    assert _curve_x(narrow, "ddtree wy") == [3, 7]


def _find(widget, kind, description=None):
    """Depth-first search of a widget tree for the first ``kind`` (with ``description``)."""
    if isinstance(widget, kind) and (description is None or widget.description == description):
        return widget
    for child in getattr(widget, "children", ()):
        found = _find(child, kind, description)
        if found is not None:
            return found
    return None


def test_explorer_redraws_on_change(frame):
    box = widgets.explorer(frame)
    assert isinstance(box, w.VBox)
    slider = _find(box, w.SelectionRangeSlider, "budget")
    out = _find(box, w.Output)
    assert slider.options == (1, 3, 7, 15) and slider.value == (1, 15)
    assert "ddtree-figure" in out._dom_classes
    (first,) = out.outputs
    assert first["output_type"] == "display_data" and first["data"]["image/png"]
    slider.value = (3, 7)
    (second,) = out.outputs
    assert second["data"]["image/png"] != first["data"]["image/png"]
    _find(box, w.Dropdown, "arch").value = "mla"
    assert out.outputs[0]["data"]["image/png"] != second["data"]["image/png"]


def test_explorer_offers_every_value_and_greys_out_what_does_not_apply(frame):
    box = widgets.explorer(frame, gdn_mode="wy", block_size={"gdn": 4, "mla": 4})
    drop = {name: _find(box, w.Dropdown, label) for name, label in widgets.DROPDOWNS.items()}
    assert drop["gdn_mode"].value == "wy" and drop["gdn_mode"].options == ("all", "naive", "wy")
    assert drop["temperature"].options == (0.0, 1.0) and not drop["temperature"].disabled
    assert drop["max_new_tokens"].disabled and not drop["prompt"].disabled  # one length stored: greyed out
    assert all(d.style.description_width == "initial" for d in drop.values())  # labels never cut
    drop["arch"].value = "mla"
    assert drop["gdn_mode"].disabled and drop["gdn_mode"].value == "all"
    assert drop["temperature"].options == (0.0,) and drop["temperature"].disabled
    drop["prompt"].value = 2
    png = _find(box, w.Output).outputs[0]["data"]["image/png"]
    assert png == widgets.figure_output(widgets.render(frame, "mla", "all", 4, 0.0, (1, 15),
                                                                   prompt=2, max_new_tokens=8))["data"]["image/png"]


def test_render_empty_selection(frame):
    assert widgets.select(frame, "mla", "all", 4, 1.0, None).empty  # no mla run at T = 1
    fig = widgets.render(frame, arch="mla", temperature=1.0)
    assert [ax.texts[0].get_text() for ax in fig.axes] == ["no DDTree rows"] * 3


def test_temperature_control_offers_every_stored_temperature(frame):
    """T = 0, 0.3, 0.6 and 1 stored: the explorer offers all four, and picking 0.6 draws its rows."""
    import pandas as pd
    sampled = frame[frame.temperature == 1.0]
    more = pd.concat([frame] + [sampled.assign(temperature=t) for t in (0.3, 0.6)], ignore_index=True)
    assert widgets.sweep_controls_spec(more, "gdn")["temperature"] == [0.0, 0.3, 0.6, 1.0]
    box = widgets.explorer(more, gdn_mode="wy", block_size={"gdn": 4, "mla": 4})
    drop = _find(box, w.Dropdown, "temperature")
    assert drop.options == (0.0, 0.3, 0.6, 1.0) and not drop.disabled
    drop.value = 0.6
    png = _find(box, w.Output).outputs[0]["data"]["image/png"]
    at = widgets.budgets_at(more, "gdn", 0.6, 4, "wy", 8)   # the slider follows the budgets stored at T = 0.6
    assert png == widgets.figure_output(widgets.render(more, "gdn", "wy", 4, 0.6, (at[0], at[-1]),
                                                                   prompt="all", max_new_tokens=8))["data"]["image/png"]


def test_the_rule_explorer_takes_rule_objects_and_built_in_names():
    """Notebook 09's widget: a rule of one's own and "unary" (DDTree) side by side; choosing a
    rule or a budget draws that rule's tree on a real round (the shipped MLA pair)."""
    def two_first(draft, root_token, budget):
        return from_rank_paths(draft.logits, root_token, [(0,), (1,), (0, 0), (1, 0)][:budget])
    summary = pandas.DataFrame({"arch": "mla", "method": ["ar", "ddtree", "ddtree", "ddtree", "ddtree"],
                            "rule": ["AR", "DDTree", "DDTree", "two_first", "two_first"],
                            "budget": [0, 2, 4, 2, 4], "tau": [1.0, 2.0, 2.5, 1.8, 2.1]})
    box = widgets.rule_explorer(summary, ["unary", two_first], {"mla": load_pair("mla")}, rule="two_first", budget=4)
    rule, budget = box.children[0].children[1], box.children[0].children[2]
    assert list(rule.options) == ["DDTree", "two_first"] and list(budget.options) == [2, 4]
    first = box.children[-1].outputs[0]["data"]["image/png"]
    rule.value = "DDTree"
    budget.value = 2
    assert box.children[-1].outputs[0]["data"]["image/png"] != first


def test_the_explorer_offers_and_titles_only_what_it_draws(frame):
    """05: GDN mode 'all' redrew the wy curve alone under the title 'all GDN modes' (the run holds
    wy only); at T = 0.3 the budget slider still read 1-256 while the data stop at 64."""
    import pandas as pd
    one_mode = frame[(frame.gdn_mode == "wy") | (frame.arch != "gdn")]
    assert widgets.sweep_controls_spec(one_mode, "gdn")["gdn_mode"] == ["wy"]   # no 'all' that draws one mode
    sampled = frame[(frame.temperature == 1.0) & ((frame.budget.astype(str) != "15") | (frame.method != "ddtree"))]
    more = pd.concat([frame, sampled.assign(temperature=0.3)], ignore_index=True)
    assert widgets.budgets_at(more, "gdn", 0.3, 4, "wy", 8) == [b for b in widgets.budgets_at(more, "gdn", 0.3) if b < 15]
    box = widgets.explorer(more, gdn_mode="wy", block_size={"gdn": 4, "mla": 4})
    slider = _find(box, w.SelectionRangeSlider, "budget")
    assert slider.value == (1, 15)
    _find(box, w.Dropdown, "temperature").value = 0.3
    top = max(widgets.budgets_at(more, "gdn", 0.3, 4, "wy", 8))
    assert slider.options[-1] == top < 15 and slider.value[1] == top
