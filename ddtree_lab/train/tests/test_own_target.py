"""Your own models (issue 25), end to end on a tiny random Qwen3 (the DDTree paper's target
class, not shipped here) saved with its own tokenizer: ``ddtree-lab train-drafter --target DIR
--out DIR`` trains a drafter for it; the directory is a published ``DFlashDraftModel`` that
``dflash``'s own ``dflash_generate`` decodes with; the pair from the two directories decodes
losslessly, benches from the command line and runs a notebook through ``CHECKPOINTS``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from dflash.model import DFlash2DraftModel, DFlashDraftModel
from transformers import (PreTrainedTokenizerFast, Qwen3_5ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3NextConfig,
                          Qwen3NextForCausalLM)

from ddtree_lab.app.cli import main
from ddtree_lab.app.notebooks import NOTEBOOK_DIR, run_notebook
from ddtree_lab.core.decode import generate
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig
from ddtree_lab.core.models import arch_of
from ddtree_lab.experiments.studies.official import lab_generate_aligned, official_generate
from ddtree_lab.train import data
from ddtree_lab.train.checkpoints import ckpt_path
from ddtree_lab.train.drafters import dflash2_from
from ddtree_lab.train.pair import load_pair, pair_from_dirs

torch.set_num_threads(1)
# one worker holds the module's fixtures: two workers training the same drafter would race on
# its content-keyed rollout cache (data/cache)
pytestmark = pytest.mark.xdist_group("own_target")


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    """A random tiny Qwen3ForCausalLM with its own tokenizer files (the lab's BPE, saved the HF way)."""
    tok = data.load_tokenizer()
    cfg = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, intermediate_size=64, max_position_embeddings=1024)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("qwen3")
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def drafter_dir(qwen3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("own") / "my-drafter"
    main(["--threads", "1", "train-drafter", "--target", str(qwen3_dir), "--out", str(out), "--preset", "toy",
          "--corpus-share", "0.25", "--steps", "200"])
    return out


def test_the_drafter_ships_with_its_recipe_and_its_run_beside_it(drafter_dir):
    manifest = json.loads((drafter_dir / "manifest.json").read_text())
    assert manifest["arch"] == "attention" and manifest["recipe"]["corpus_share"] == 0.25
    assert manifest["train_state"]["step"] == 200
    assert (drafter_dir.parent / "my-drafter.run" / "log.csv").is_file()  # not under data/


def test_the_pair_from_directories_decodes_losslessly(qwen3_dir, drafter_dir):
    pair = pair_from_dirs(qwen3_dir, drafter_dir)
    assert pair.arch == "attention" and type(pair.tokenizer).__name__ == "Tokenizer"
    prompt = pair.prompt_ids(0)[:24]
    ar = generate(pair.target, pair.drafter, prompt, method="ar", max_new_tokens=16)
    for method in ("dflash", "ddtree"):
        assert generate(pair.target, pair.drafter, prompt, method=method, block_size=8,
                        max_new_tokens=16).tokens == ar.tokens


def test_dflash_loads_it_and_its_reference_loop_equals_the_labs(qwen3_dir, drafter_dir):
    pair = load_pair("attention", qwen3_dir, drafter_dir)
    published = DFlashDraftModel.from_pretrained(drafter_dir, dtype=torch.float32).eval()
    assert type(pair.drafter.model) is DFlashDraftModel
    prompt = pair.prompt_ids(3)[:20]
    ref = official_generate(pair.target, type("D", (), {"model": published})(), prompt, 24, 8)
    tokens, gen = lab_generate_aligned(pair.target, pair.drafter, prompt, 24, 8)
    assert tokens == ref["tokens"]
    assert gen.acceptance_lengths[:-1] == ref["acceptance_lengths"][:len(gen.acceptance_lengths) - 1]


@pytest.mark.slow
@pytest.mark.parametrize("command", [["bench", "--prompts", "1", "--max-new-tokens", "8"],
                                     ["sweep", "--prompts", "1", "--max-new-tokens", "8", "--budgets", "4",
                                      "--block-sizes", "8"],
                                     ["concurrency", "--smoke", "--prompts", "1"],
                                     ["compare-drafters", "--prompts", "1", "--max-new-tokens", "8"]])
def test_the_decoding_commands_run_on_the_directory_pair(qwen3_dir, drafter_dir, command, capsys):
    pair = ["--target", str(qwen3_dir), "--drafter", str(drafter_dir)]
    main(["--threads", "1", *command, *pair, *(pair[2:] if command[0] == "compare-drafters" else [])])
    out = capsys.readouterr().out
    assert ("attention" in out) if command[0] != "compare-drafters" else ("1/1" in out)
    assert out.strip().splitlines()[-1].startswith("wrote ")   # what it wrote, and where
    assert "PASS" not in out and "MISS" not in out              # no goal of the shipped pairs scores this one


@pytest.fixture(scope="module")
def constant_pair(qwen3_dir, tmp_path_factory):
    """(target dir, drafter dir): the tiny Qwen3 with its final norm's gain 0, so every logit is
    0 and its greedy token is always id 0, and a random published drafter whose output norm
    starts at that gain (``DFlashDrafter.from_config``), so it drafts id 0 too: a pair of a
    class not shipped here whose drafts the target accepts, without training."""
    target = Qwen3ForCausalLM.from_pretrained(qwen3_dir)
    with torch.no_grad():
        target.model.norm.weight.zero_()
    root = tmp_path_factory.mktemp("constant")
    target.save_pretrained(root / "target")
    PreTrainedTokenizerFast(tokenizer_object=data.load_tokenizer()).save_pretrained(root / "target")
    cfg = DrafterConfig.for_target(target, data.special_ids(data.load_tokenizer())["mask"], num_layers=1,
                                   block_size=16)
    torch.manual_seed(0)
    DFlashDrafter.from_config(cfg, target).model.save_pretrained(root / "drafter")
    return root / "target", root / "drafter"


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("name,params", [("00_quickstart", {"ARCH": "attention"}),
                                         ("01_tree_construction", {"ARCH": "attention"}),
                                         ("05_budget_sweeps", {"ARCHS": ["attention"]}),
                                         ("07_concurrency", {"ARCHS": ["attention"]})])
def test_the_notebooks_run_on_a_directory_pair_of_another_class(constant_pair, tmp_path, name, params):
    """The notebooks that take any target (a label and ``CHECKPOINTS``) run top to bottom on a
    pair of a class not shipped here; every check they make holds. (06 takes CHECKPOINTS too,
    but this constant pair loops from its first token, and 06 reads rounds outside loops.)"""
    target_dir, drafter_dir = constant_pair
    nb = run_notebook(NOTEBOOK_DIR / f"{name}.ipynb", timeout=600, executed_dir=tmp_path, SMOKE=True,
                      CHECKPOINTS={"attention": (str(target_dir), str(drafter_dir))}, **params)
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "match:    False" not in text and "match:    True" in text   # checks ran, and every one held


@pytest.fixture(scope="module")
def drafter2_dir(qwen3_dir, drafter_dir, tmp_path_factory):
    """``train-drafter2 --target DIR --drafter DIR --out DIR`` on the tiny Qwen3 (toy preset)."""
    out = tmp_path_factory.mktemp("own2") / "my-drafter2"
    main(["--threads", "1", "train-drafter2", "--target", str(qwen3_dir), "--drafter", str(drafter_dir),
          "--out", str(out), "--preset", "toy"])
    return out


def as_qwen3_next(target: Qwen3_5ForCausalLM) -> Qwen3NextForCausalLM:
    """The same network in Qwen3-Next's layout: every MLP dense (``mlp_only_layers``), the GDN
    projections fused the way Qwen3-Next stores them (``in_proj_qkvz`` and ``in_proj_ba``, grouped
    per key head, [q, k, v, z] and [b, a]), one rotary section (text positions are equal on
    Qwen3.5's three, so its interleaved rope is the plain one). Every other weight by name."""
    c = target.config
    layers = c.num_hidden_layers
    shared = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
              "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
              "linear_num_value_heads")
    cfg = Qwen3NextConfig(num_hidden_layers=layers, layer_types=list(c.layer_types), mlp_only_layers=list(range(layers)),
                          rope_parameters={k: v for k, v in c.rope_parameters.items() if k != "mrope_section"},
                          **{k: getattr(c, k) for k in shared})
    nk, nv = c.linear_num_key_heads, c.linear_num_value_heads

    def per_head(*parts):
        """[out, hidden] weights -> one, their rows interleaved per key head."""
        return torch.cat([p.reshape(nk, -1, p.shape[-1]) for p in parts], 1).flatten(0, 1)

    weights = target.state_dict()
    fused = {}
    for name, w in weights.items():
        if ".in_proj_qkv." in name:
            q, k, v = w.split([nk * c.linear_key_head_dim] * 2 + [nv * c.linear_value_head_dim])
            z, b, a = (weights[name.replace("in_proj_qkv", part)] for part in ("in_proj_z", "in_proj_b", "in_proj_a"))
            fused[name.replace("in_proj_qkv", "in_proj_qkvz")] = per_head(q, k, v, z)
            fused[name.replace("in_proj_qkv", "in_proj_ba")] = per_head(b, a)
        elif not any(f".{part}." in name for part in ("in_proj_z", "in_proj_b", "in_proj_a")):
            fused[name] = w
    model = Qwen3NextForCausalLM(cfg)
    model.load_state_dict(fused, strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def next_pair(tmp_path_factory):
    """(target dir, drafter dir): the shipped GDN target re-expressed as a Qwen3NextForCausalLM
    (``as_qwen3_next``: another GDN class, the same function) with the shipped GDN drafter, a
    trained pair of a class not shipped here, whose drafts the target accepts."""
    root = tmp_path_factory.mktemp("next")
    shipped = load_pair("gdn")
    as_qwen3_next(shipped.target).save_pretrained(root / "target")
    PreTrainedTokenizerFast(tokenizer_object=data.load_tokenizer()).save_pretrained(root / "target")
    (root / "drafter").mkdir()
    for name in ("config.json", "model.safetensors"):   # published files only: its manifest names the shipped target
        shutil.copy(ckpt_path("gdn", "drafter") / name, root / "drafter" / name)
    return root / "target", root / "drafter"


def test_the_qwen3_next_twin_is_the_shipped_target(next_pair):
    """Same logits (float32, to rounding) from the shipped Qwen3.5 and its Qwen3-Next twin."""
    shipped = load_pair("gdn")
    twin = Qwen3NextForCausalLM.from_pretrained(next_pair[0], dtype=torch.float32).eval()
    ids = torch.tensor([shipped.prompt_ids(0)[:48]])
    with torch.no_grad():
        want, got = shipped.target(ids).logits, twin(ids).logits
    assert arch_of(twin) == "gdn"   # the lab reads it by its layer types: the GDN path, not the shipped class
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("name,params,pair", [("03_exact_masking_mla", {"ARCH": "attention"}, "constant_pair"),
                                              ("02_state_leakage_gdn", {}, "next_pair"),
                                              ("04_exact_gdn", {}, "next_pair"),
                                              ("06_drafter_calibration", {"ARCHS": ["gdn"]}, "next_pair")])
def test_the_notebooks_of_one_target_run_on_a_directory_pair_of_another_class(name, params, pair, tmp_path, request):
    """03 on the constant Qwen3 pair (label "attention"); 02, 04 and 06 on the Qwen3-Next twin of
    the shipped GDN target with its drafter (label "gdn"): top to bottom, every check it makes
    holds or says why it cannot."""
    dirs = request.getfixturevalue(pair)
    label = params.get("ARCH", "gdn")
    nb = run_notebook(NOTEBOOK_DIR / f"{name}.ipynb", timeout=600, executed_dir=tmp_path, SMOKE=True,
                      CHECKPOINTS={label: tuple(map(str, dirs))}, **params)
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "match:    False" not in text and "match:    True" in text   # checks ran, and every one held


@pytest.fixture(scope="module")
def constant_drafter2(constant_pair):
    """A DFlash 2 drafter for the constant pair: ``dflash2_from`` its DFlash drafter (it starts as
    that drafter exactly, so it drafts id 0 too)."""
    target_dir, drafter_dir = constant_pair
    pair = pair_from_dirs(target_dir, drafter_dir)
    out = drafter_dir.parent / "drafter2"
    dflash2_from(pair.drafter, pair.target).model.save_pretrained(out)
    return out


@pytest.mark.slow
@pytest.mark.notebook
def test_notebook_08_runs_on_a_directory_pair_of_another_class(constant_pair, constant_drafter2, tmp_path):
    """08 takes a target of one's own with both its drafters (``CHECKPOINTS``: three directories)."""
    nb = run_notebook(NOTEBOOK_DIR / "08_dflash2_trees.ipynb", timeout=600, executed_dir=tmp_path, SMOKE=True,
                      ARCHS=["attention"], CHECKPOINTS={"attention": (*map(str, constant_pair), str(constant_drafter2))})
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "match:    False" not in text and "match:    True" in text   # checks ran, and every one held


@pytest.mark.slow
def test_train_drafter2_for_your_own_target(qwen3_dir, drafter2_dir):
    """``train-drafter2 --target DIR --drafter DIR --out DIR``: a published DFlash 2 drafter of a
    class not shipped here, started from its DFlash drafter, whose conditional trees decode
    losslessly."""
    out = drafter2_dir
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arch"] == "attention" and (out.parent / "my-drafter2.run").is_dir()
    assert type(DFlash2DraftModel.from_pretrained(out, dtype=torch.float32)) is DFlash2DraftModel
    pair = pair_from_dirs(qwen3_dir, out)
    assert pair.drafter.selector is not None
    prompt = pair.prompt_ids(1)[:20]
    ar = generate(pair.target, None, prompt, method="ar", max_new_tokens=12)
    assert generate(pair.target, pair.drafter, prompt, method="ddtree", budget=8, max_new_tokens=12).tokens == ar.tokens


@pytest.mark.slow
def test_the_dflash2_study_runs_on_the_directory_pair_and_keeps_its_rows_apart(qwen3_dir, drafter_dir,
                                                                               drafter2_dir, capsys):
    """``dflash2 --target DIR --drafter DIR --drafter2 DIR``: the interleaved run, the lossless
    rows and the teacher-forced lens of a target of one's own, written under pairs/, lossless."""
    from ddtree_lab.experiments.plumbing.results import ResultsStore
    from ddtree_lab.experiments.studies import dflash2 as d2
    main(["--threads", "1", "dflash2", "--target", str(qwen3_dir), "--drafter", str(drafter_dir),
          "--drafter2", str(drafter2_dir), "--study-prompts", "1", "--lossless-prompts", "2", "--tf-problems", "1"])
    out = capsys.readouterr().out
    written = Path(out.rsplit("wrote the DFlash 2 study's rows to ", 1)[1].strip())
    assert "pairs" in written.parts and written.name.startswith("attention-")   # never the README's stores
    rows = ResultsStore(d2.STORE, written).frame()
    assert set(rows.arch) == {"attention"} and set(rows.drafter) == {"dflash", "dflash2"}
    study = d2.summary(rows[rows.run == d2.RUN])
    assert (study[(study.temperature == 0) & (study.method != "ar")].matches_ar == 1).all()   # lossless
    assert len(rows[rows.run == d2.LOSSLESS_RUN].prompt.unique()) == 2
    assert (written / f"{d2.TF_STORE}.jsonl").is_file()


TARGET, DRAFTER = str(ckpt_path("gdn", "target")), str(ckpt_path("gdn", "drafter"))  # directories that pass argparse


@pytest.mark.parametrize("argv,message", [
    (["dflash2", "--drafter", DRAFTER], "go with --target"),
    (["dflash2", "--target", TARGET, "--drafter", DRAFTER], "--target needs --drafter DIR"),
    (["train-drafter", "--preset", "toy"], "give --arch"),
    (["train-drafter2", "--preset", "toy"], "give --arch"),
    (["train-drafter2", "--target", TARGET, "--out", "y"], "--target needs --drafter"),
    (["train-drafter", "--arch", "gdn", "--target", TARGET, "--out", "y"], "not both"),
    (["train-drafter", "--target", TARGET], "--target needs --out"),
])
def test_train_drafter_refuses_unclear_targets(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


@pytest.mark.parametrize("flag,value", [("--corpus-share", "1.5"), ("--steps", "0")])
def test_recipe_knobs_are_range_checked(flag, value, capsys):
    with pytest.raises(SystemExit):
        main(["train-drafter", "--arch", "gdn", flag, value])
    assert flag in capsys.readouterr().err



@pytest.mark.slow
def test_quality_runs_on_the_directory_pair_and_keeps_its_rows_apart(qwen3_dir, drafter_dir, capsys):
    main(["--threads", "1", "quality", "--prompts", "1", "--target", str(qwen3_dir), "--drafter", str(drafter_dir)])
    out = capsys.readouterr().out
    written = Path(out.rsplit("tables -> ", 1)[1].splitlines()[0].strip())
    assert written.name == "quality.json" and "pairs" in written.parts            # never the README's stores
    tables = json.loads(written.read_text())
    assert [r["arch"] for r in tables["targets"]] == ["attention"] and "params_total" not in tables["targets"][0]
    lab = [r for r in tables["decoding"] if r["method"] in ("dflash", "ddtree")]
    assert lab and all(r["same_as_ar"] == 1.0 for r in lab)                        # lossless on its own pair
