"""Load-aware budgets and the budget x concurrency sweep (issue 13 items 2-3).

- ``allocate_budgets`` == its brute-force twin ``naive.allocate_budgets`` on random cases; flat / steep costs;
- ``auto_trees`` never exceeds the cost model's per-sequence maximum;
- ``BatchCostModel`` interpolates its grid (and extends past it);
- batched ``auto`` decoding at T = 0: every sequence equals its own batch-1 AR output;
- the sweep store resumes (a rerun runs nothing, an interrupted run keeps its rows) and
  summarises; the README block says so when the store is absent.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from ddtree_lab.core import allocate, decode, naive
from ddtree_lab.core.tree import build_tree
from ddtree_lab.experiments.studies import concurrency as conc
from ddtree_lab.experiments.plumbing.costs import BatchCostModel, batch_cost_model
from ddtree_lab.train.pair import Pair
from helpers import BatchHintedDrafter, assert_close, toy_pair

# a synthetic batched cost model: verify grows with the total nodes, more per node in a
# bigger batch's range; per-sequence maximum 16
COST = BatchCostModel(batches=(1, 2, 4), budgets=(1, 4, 16), verify_s=((1.0, 1.2, 2.0), (1.1, 1.5, 3.0),
                                                                        (1.3, 2.2, 6.0)), draft_s=(0.2, 0.25, 0.3))

CHEAP = BatchCostModel((1, 2, 4), (1, 4, 16), ((1.0, 1.01, 1.05), (1.0, 1.02, 1.1), (1.0, 1.04, 1.2)),
                       (0.2, 0.2, 0.2))  # nodes nearly free: trees of many sizes


def random_case(seed: int):
    """B in 1..3 sequences of 1..4 non-increasing gains in (0, 1), and increasing seconds
    over B x the largest size (what a padded verify can reach)."""
    g = torch.Generator().manual_seed(seed)
    B = int(torch.randint(1, 4, (1,), generator=g))
    gains = [torch.rand(int(torch.randint(1, 5, (1,), generator=g)), generator=g, dtype=torch.float64)
             .sort(descending=True).values for _ in range(B)]
    n = torch.arange(1, B * max(x.numel() for x in gains) + 1, dtype=torch.float64)
    a, b, c = torch.rand(3, generator=g, dtype=torch.float64)
    return gains, 0.5 + a + b * 0.3 * n + c * 0.05 * n ** 2


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "packed"])
@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"seed{s}")
def test_allocate_budgets_equals_its_reference(seed, padded):
    gains, seconds = random_case(seed)
    fast = allocate.allocate_budgets(gains, seconds, padded)
    ref = naive.allocate_budgets(gains, seconds, padded)
    print(f"seed {seed}: sizes {[x.numel() for x in gains]} -> {fast} (reference {ref})")
    assert fast == ref
    if padded:  # the padding is paid anyway: every tree as large as the largest allows
        assert fast == [min(max(fast), x.numel()) for x in gains]


def test_allocate_budgets_flat_and_steep_costs():
    gains = [torch.tensor([0.9, 0.5, 0.1], dtype=torch.float64), torch.tensor([0.3, 0.2], dtype=torch.float64)]
    for padded in (True, False):
        assert allocate.allocate_budgets(gains, torch.ones(6, dtype=torch.float64), padded) == [3, 2]  # free: all
        steep = torch.arange(1, 7, dtype=torch.float64) ** 4
        assert allocate.allocate_budgets(gains, steep, padded) == [1, 1]  # each node costs more than it brings
    # packed: the better sequence gets the nodes first, its second node (0.5) before the other's (0.2)
    seconds = torch.tensor([1.0, 1.0, 1.05, 1.6, 2.5, 3.0], dtype=torch.float64)
    assert allocate.allocate_budgets(gains, seconds, padded=False) == [2, 1]
    # padded: a largest budget of 2 costs 4 verify tokens, and then both trees take 2 nodes
    seconds = torch.tensor([1.0, 1.0, 1.1, 1.1, 3.0, 3.0], dtype=torch.float64)
    assert allocate.allocate_budgets(gains, seconds, padded=True) == [2, 2]
    with pytest.raises(ValueError, match="seconds"):
        allocate.allocate_budgets(gains, torch.ones(5), padded=True)  # padded reaches 2 x 3 tokens


def test_auto_trees_never_exceed_the_per_sequence_max():
    g = torch.Generator().manual_seed(0)
    logits = [torch.randn(7, 50, generator=g) * s for s in (0.5, 2.0, 6.0, 1.0)]
    flat = BatchCostModel((1, 4), (1, 16), ((1.0, 1.0), (1.0, 1.0)), (0.1, 0.1))
    def full(cm):
        return [build_tree(d, r, cm.max_budget) for d, r in zip(logits, [1, 2, 3, 4])]
    trees = allocate.auto_trees(full(flat), flat)
    assert [t.num_nodes for t in trees] == [16] * 4  # free nodes: every sequence at the maximum
    for cm, padded in itertools.product((COST, flat), (True, False)):
        sizes = [t.num_nodes for t in allocate.auto_trees(full(cm), cm, padded)]
        print(f"max {cm.max_budget}, padded {padded}: sizes {sizes}")
        assert all(1 <= s <= cm.max_budget for s in sizes)
    for t, d in zip(allocate.auto_trees(full(COST), COST), logits):  # each a prefix of the full tree
        assert torch.equal(t.tokens, build_tree(d, int(t.tokens[0]), COST.max_budget).tokens[:len(t)])


def test_batch_cost_model_interpolates_its_grid():
    at = COST.batch_round_seconds(torch.tensor([2, 8, 32]), 2)  # batch 2: budgets 1, 4, 16 per sequence
    assert_close("grid points", torch.tensor([1.1, 1.5, 3.0], dtype=torch.float64) + 0.25, at, 1e-12)
    mid = COST.batch_round_seconds(torch.tensor([12]), 3)  # halfway between batches 2 and 4
    lo, hi = COST.batch_round_seconds(torch.tensor([12]), 2), COST.batch_round_seconds(torch.tensor([12]), 4)
    assert_close("between batches", (lo + hi) / 2, mid, 1e-12)
    beyond = COST.batch_round_seconds(torch.tensor([16, 28]), 1)  # past batch 1's last point: its last slope
    assert_close("past the grid", torch.tensor([2.2, 2.2 + 12 * 0.8 / 12]), beyond.float(), 1e-6)
    assert_close("batch 1 = round_seconds", COST.round_seconds(torch.tensor([4])), COST.batch_round_seconds(
        torch.tensor([4]), 1), 1e-12)


@pytest.mark.parametrize("preset,mode", [("gdn-toy", "wy"), ("gdn-toy", "fork"), ("mla-toy", "wy")],
                         ids=lambda x: x)
def test_batched_auto_is_lossless_at_t0(preset, mode):
    target, drafter = toy_pair(preset)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, target.config.vocab_size - 1, (n,), generator=g) for n in (1, 6, 11, 4)]
    max_new = [14, 6, 10, 12]
    ar = [decode.generate(target, None, p, method="ar", max_new_tokens=n).tokens for p, n in zip(prompts, max_new)]
    hinted = BatchHintedDrafter(drafter, [p.tolist() + a for p, a in zip(prompts, ar)])
    gens = decode.generate_batch(target, hinted, prompts, method="ddtree", budget="auto", cost_model=CHEAP,
                                block_size=8, max_new_tokens=max_new, gdn_mode=mode)
    sizes = sorted({s for x in gens for s in x.tree_sizes})
    print(f"{preset} {mode}: tree sizes {sizes}, taus {[round(x.tau, 2) for x in gens]}")
    assert [x.tokens for x in gens] == ar
    assert max(sizes) <= CHEAP.max_budget and len(sizes) > 1  # budgets chosen per round


def test_auto_needs_a_batched_cost_model():
    target, drafter = toy_pair("gdn-toy")
    with pytest.raises(ValueError, match="budget"):
        decode.generate_batch(target, drafter, [[1, 2], [3]], method="ddtree", budget="auto", max_new_tokens=4)
    with pytest.raises(ValueError, match="budget"):
        decode.generate_batch(target, drafter, [[1, 2], [3]], method="ddtree", budget=["auto", 4], max_new_tokens=4,
                             cost_model=COST)
    from ddtree_lab.experiments.plumbing.costs import CostModel
    batch_one = CostModel(budgets=(1, 16), verify_s=(1.0, 2.0), draft_s=0.1)  # measured at batch 1 only
    with pytest.raises(ValueError, match="measured over batches"):
        decode.generate_batch(target, drafter, [[1, 2], [3]], method="ddtree", budget="auto", max_new_tokens=4,
                              cost_model=batch_one)
    assert len(decode.generate_batch(target, drafter, [[1, 2]], method="ddtree", budget="auto", max_new_tokens=4,
                                     cost_model=batch_one)[0].tokens) == 4  # a batch of one: it is enough


# ----------------------------------------------------------------------------- the sweep

GRID = conc.ConcurrencyGrid(archs=("gdn",), concurrency=(1, 2), budgets=(1, 4), t1_budgets=(4,),
                            temperatures=(0.0, 1.0), block_size=4, max_new_tokens=6, num_prompts=2,
                            cost_batches=(1, 2), cost_budgets=(1, 4), min_pairs=2)  # c = 2: one group, 2 repeats


def toy_prompt(pair, prompt_id: int) -> list[int]:
    g = torch.Generator().manual_seed(100 + prompt_id)
    return torch.randint(0, pair.target.config.vocab_size - 1, (4 + prompt_id,), generator=g).tolist()


@pytest.fixture(scope="module")
def pairs():
    target, drafter = toy_pair("gdn-toy", block_size=4)
    return {"gdn": Pair("gdn", target, drafter, None, "t-toy", "d-toy")}


def counting(calls, crash_at=None):
    def run(cfg, group, pair, grid, prompts, cost_dir):
        if crash_at is not None and len(calls) == crash_at:
            raise KeyboardInterrupt("interrupted")
        calls.append((cfg["method"], cfg["budget"], cfg["concurrency"], group))
        return conc.run_group(cfg, group, pair, grid, prompts, cost_dir)
    return run


def test_the_sweep_resumes_and_summarises(tmp_path, pairs):
    store = conc.concurrency_store(directory=tmp_path)
    n_rows = sum(conc.num_groups(c["concurrency"], GRID.num_prompts) * conc.num_repeats(c["concurrency"], GRID)
                 for c in conc.concurrency_configs(GRID))
    calls = []
    with pytest.raises(KeyboardInterrupt):
        conc.run_concurrency(GRID, store, pairs, prompts=toy_prompt, cost_dir=tmp_path, progress=False,
                             runner=counting(calls, crash_at=7))
    assert len(store.rows()) == 7  # every finished row kept
    more = []
    frame = conc.run_concurrency(GRID, store, pairs, prompts=toy_prompt, cost_dir=tmp_path, progress=False,
                                 runner=counting(more))
    assert len(more) == n_rows - 7 and len(frame) == n_rows
    again = []
    conc.run_concurrency(GRID, store, pairs, prompts=toy_prompt, cost_dir=tmp_path, progress=False,
                         runner=counting(again))
    assert again == []  # a rerun skips every stored row
    assert list(tmp_path.glob("batchcost-*.json"))  # auto measured its cost model once, stored
    summary = conc.summarize_concurrency(frame)
    print(summary[["temperature", "concurrency", "method", "budget", "tokens_per_s", "speedup",
                   "tau", "mean_tree_size", "matches_ar"]].round(3).to_string(index=False))
    assert len(summary) == len(conc.concurrency_configs(GRID))
    assert (summary[summary.method == "ar"].speedup == 1).all()
    assert (summary.n_sequences == GRID.num_prompts).all() and (summary.n_pairs == 2).all()
    assert set(frame[frame.concurrency == 2].run) == {"repeat-0", "repeat-1"} and set(frame[frame.concurrency == 1].run) == {"repeat-0"}
    auto = summary[summary.budget == "auto"]
    assert (auto.mean_tree_size <= GRID.cost_budgets[-1]).all()
    table = conc.concurrency_table(summary)
    assert list(table.concurrency) == [1, 2, 1, 2] and set(table.best_budget) <= {1, 4}
    for m, method in zip(frame._metrics, frame.method):  # every method's forwards timed, inside its wall time
        f = m["forwards"]
        assert 0 < f["target"] + f["drafter"] <= m["seconds"] and (f["drafter"] == 0) == (method == "ar")
    assert summary.ceiling.notna().all() and (summary.ceiling >= summary.speedup * 0.999).all()
    assert table.best_ceiling.notna().all() and set(table.best_ceiling_budget) <= {1, 4}


def fake_timing(seconds, forwards=None):
    """A runner with no model: every sequence 'decodes' 6 tokens in ``seconds(cfg, group, call)``;
    ``forwards(cfg, wall seconds)``: the row's seconds inside its forwards (None: a row stored
    before they were timed)."""
    calls = []
    def run(cfg, group, pair, grid, prompts, cost_dir):
        calls.append(cfg)
        pids = conc.group_prompts(group, cfg["concurrency"], grid.num_prompts)
        n, wall = len(pids), seconds(cfg, group, len(calls))
        fwd = {} if forwards is None else {"forwards": {"target": forwards(cfg, wall), "drafter": 0.0}}
        return {"prompts": pids, "tokens": [[1] * 6] * n, "acceptance_lengths": [[3, 3]] * n,
                "tree_sizes": [[4, 4]] * n, "round_looping": [[False, False]] * n,
                "round_copyable": [[False, False]] * n, "ends_in_loop": [False] * n,
                "timings": {}, "seconds": wall, "tokens_per_s": 0.0, "tau": 3.0, "rounds": 2, **fwd}
    return run


@pytest.mark.parametrize("gap", [0.5, 0.0], ids=["clear", "tie"])
def test_speedups_carry_intervals_and_a_best_within_the_noise_is_a_tie(tmp_path, pairs, gap):
    """Budget 4 is 1 - gap of budget 1's seconds, with +-3% noise; AR 2 s, DFlash 1.5 s. Six
    units per config: every speedup gets a 95% interval; a clear winner is best alone, equal
    budgets are a tie."""
    grid = conc.ConcurrencyGrid(archs=("gdn",), concurrency=(1, 8), budgets=(1, 4), t1_budgets=(1,),
                                temperatures=(0.0,), max_new_tokens=6, num_prompts=2)
    rng = iter(torch.rand(1000, generator=torch.Generator().manual_seed(1)).tolist())
    def seconds(cfg, group, call):
        base = {"ar": 2.0, "dflash": 1.5}.get(cfg["method"]) or {1: 1.0, 4: 1.0 - gap, "auto": 1.1}[cfg["budget"]]
        return base * (0.97 + 0.06 * next(rng))
    conc.run_concurrency(grid, conc.concurrency_store(directory=tmp_path), pairs, progress=False,
                         runner=fake_timing(seconds))
    frame = conc.grid_frame(conc.concurrency_store(directory=tmp_path), grid)
    assert len(frame) == 2 * 6 * 5  # 6 units per config (c = 1: 2 groups x 3 repeats; c = 8: 1 x 6), 5 configs
    summary = conc.summarize_concurrency(frame)
    table = conc.concurrency_table(summary)
    print(table[["concurrency", "best_budget", "tied_budgets", "best_speedup", "best_speedup_lo",
                 "best_speedup_hi", "auto_vs_best", "auto_vs_best_lo"]].to_string())
    assert (summary.n_pairs == 6).all() and summary.speedup_lo.notna().all()
    assert (summary.speedup_lo <= summary.speedup).all() and (summary.speedup <= summary.speedup_hi).all()
    dfl = summary[summary.method == "dflash"]
    assert (dfl.speedup_lo > 2 / 1.5 * 0.9).all() and (dfl.speedup_hi < 2 / 1.5 * 1.1).all()
    if gap:
        assert list(table.best_budget) == [4, 4] and table.best_clear.all()
        assert [conc.budget_label(r) for r in table.itertuples()] == ["4", "4"]
        assert (table.auto_vs_best_hi < 1).all()  # auto (1.1) is slower than budget 4 (0.5) outside the noise
    else:
        assert [r.tied_budgets for r in table.itertuples()] == [(1, 4), (1, 4)] and not table.best_clear.any()
        assert [conc.budget_label(r) for r in table.itertuples()] == ["1, 4 (tie)"] * 2


def test_the_ceiling_is_the_speedup_of_the_forwards_alone_over_ar_as_it_runs(tmp_path, pairs):
    """AR 2 s, every DDTree 1 s of which budget 1 spends 0.8 s in its forwards and budget 4
    0.5 s: speedups 2x both, ceilings 2 / 0.8 = 2.5x and 2 / 0.5 = 4x, so budget 4 is the best
    ceiling; without forward timings the ceiling reads '-'."""
    grid = conc.ConcurrencyGrid(archs=("gdn",), concurrency=(8,), budgets=(1, 4), t1_budgets=(1,),
                                temperatures=(0.0,), max_new_tokens=6, num_prompts=2)
    seconds = lambda cfg, group, call: {"ar": 2.0, "dflash": 1.5}.get(cfg["method"], 1.0)
    share = lambda cfg, wall: wall * ({"ar": 1.0, "dflash": 0.5}.get(cfg["method"])
                                      or {1: 0.8, 4: 0.5, "auto": 0.5}[cfg["budget"]])
    for forwards, expect in ((share, "4.00x [4.00, 4.00] (4)"), (None, "-")):
        store = conc.concurrency_store(directory=tmp_path / str(forwards is None))
        conc.run_concurrency(grid, store, pairs, progress=False, runner=fake_timing(seconds, forwards))
        summary = conc.summarize_concurrency(conc.grid_frame(store, grid)).set_index(["method", "budget"])
        table = conc.concurrency_table(summary.reset_index())
        assert conc.concurrency_display(table)["DDTree ceiling (budget)"].tolist() == [expect]
        if forwards is not None:
            assert summary.loc[("ddtree", 1), "ceiling"] == pytest.approx(2.5)
            assert summary.loc[("ddtree", 1), "speedup"] == pytest.approx(2.0)
            assert summary.loc[("ar", 0), "ceiling"] == pytest.approx(1.0)


def test_the_grid_checks_min_pairs():
    with pytest.raises(ValueError, match="min_pairs must be an int >= 1"):
        conc.ConcurrencyGrid(min_pairs=0)
    assert [conc.num_repeats(c, conc.GRIDS["full"]) for c in conc.GRIDS["full"].concurrency] == [1, 2, 3, 6, 6]


def test_group_prompts_cover_the_prompts():
    assert [conc.group_prompts(g, 2, 4) for g in range(conc.num_groups(2, 4))] == [[0, 1], [2, 3]]
    assert conc.group_prompts(0, 4, 2) == [0, 1, 0, 1]  # a concurrency above the prompts repeats them


@pytest.fixture(scope="module")
def swept(tmp_path_factory, pairs):
    """(folder, frame): the toy grid run once into a fresh store."""
    folder = tmp_path_factory.mktemp("concurrency")
    return folder, conc.run_concurrency(GRID, conc.concurrency_store(directory=folder), pairs, prompts=toy_prompt,
                                        progress=False)


def test_figures_and_explorer_draw_the_sweep(swept):
    from ddtree_lab.app import plots, widgets
    summary = conc.summarize_concurrency(swept[1])
    table = conc.concurrency_table(summary)
    assert len(plots.plot_best_budget(table).axes) == 1
    assert len(plots.plot_concurrency_speedup(table, ["gdn"], 1.0).axes) == 1
    assert len(plots.plot_concurrency_budgets(summary, "gdn", 0.0, 2).axes) == 2
    box = widgets.concurrency_explorer(summary, arch="gdn", temperature=1.0, concurrency=2)
    controls, out = box.children[0].children, box.children[1]
    assert [c.value for c in controls] == ["gdn", 1.0, 2] and "image/png" in out.outputs[0]["data"]
    controls[2].value = 1  # a change redraws
    assert "image/png" in out.outputs[0]["data"]


def test_readme_block_rows_per_concurrency_or_absent(tmp_path, swept, monkeypatch):
    from ddtree_lab.app import readme
    text = readme.render_concurrency(tmp_path)
    print(text)
    assert "not measured yet" in text and "ddtree-lab concurrency" in text
    monkeypatch.setitem(conc.GRIDS, "full", GRID)  # the block reads the full grid's rows: here the toy grid's
    folder, frame = swept
    text = readme.render_concurrency(folder)
    print(text)
    table = conc.concurrency_table(conc.summarize_concurrency(frame))
    rows = [line for line in text.splitlines() if line.startswith("| gdn")]
    assert len(rows) == len(GRID.concurrency)  # one row per concurrency (T = 0)
    for line, (_, r) in zip(rows, table[table.temperature == 0].iterrows()):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1:3] == [str(r.concurrency), conc.budget_label(r)] and cells[6] == f"{r.auto_speedup:.2f}x"


def test_batch_cost_model_is_measured_once(tmp_path, pairs):
    pair = pairs["gdn"]
    prefixes = [toy_prompt(pair, p) for p in range(2)]
    cm = batch_cost_model(pair.target, pair.drafter, prefixes, block_size=4, directory=tmp_path, batches=(1, 2),
                          budgets=(1, 4), repeats=1)
    again = batch_cost_model(pair.target, pair.drafter, prefixes, block_size=4, directory=tmp_path, batches=(1, 2),
                             budgets=(1, 4))
    assert again == cm and len(cm.verify_s) == 2 and all(len(v) == 2 for v in cm.verify_s)
    assert all(s > 0 for v in cm.verify_s for s in v) and cm.max_budget == 4


def test_notebook_parameters_are_the_full_grid():
    """Notebook 07 and ``ddtree-lab concurrency`` fill the same rows."""
    import ast
    import nbformat
    from ddtree_lab.app.notebooks import NOTEBOOK_DIR
    cell = nbformat.read(NOTEBOOK_DIR / "07_concurrency.ipynb", as_version=4).cells[1]
    params = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(cell.source).body}
    full = conc.GRIDS["full"]
    assert (tuple(params["ARCHS"]), tuple(params["CONCURRENCY"]), tuple(params["BUDGETS"]), tuple(params["T1_BUDGETS"]),
            tuple(params["TEMPERATURES"]), params["MAX_NEW_TOKENS"], params["NUM_PROMPTS"]) == \
        (full.archs, full.concurrency, full.budgets, full.t1_budgets, full.temperatures, full.max_new_tokens,
         full.num_prompts)
