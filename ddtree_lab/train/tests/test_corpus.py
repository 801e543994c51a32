"""The large corpus: licence filter, exact and near dedupe, HumanEval exclusion, split by
package, determinism, on a fake site-packages tree (seconds)."""
import json
from email.message import Message

import numpy as np
import pytest

from ddtree_lab.train import corpus, data


def _meta(expr=None, classifiers=(), text=None) -> Message:
    m = Message()
    if expr:
        m["License-Expression"] = expr
    for c in classifiers:
        m["Classifier"] = c
    if text:
        m["License"] = text
    return m


@pytest.mark.parametrize("meta, permissive", [
    (_meta("MIT"), True),
    (_meta("Apache-2.0 AND BSD-3-Clause"), True),
    (_meta("MPL-2.0 AND MIT"), False),
    (_meta("GPL-3.0-only OR MIT"), True),
    (_meta(classifiers=["License :: OSI Approved :: BSD License"]), True),
    (_meta(classifiers=["License :: OSI Approved :: GNU General Public License v3 (GPLv3)"]), False),
    (_meta(text="Apache 2.0 License"), True),
    (_meta(text="GNU LGPL v2.1"), False),
    (_meta(text="UNKNOWN"), False),
    (_meta(), False),
], ids=["mit", "and", "mpl", "or", "cls-bsd", "cls-gpl", "text-apache", "text-lgpl", "unknown", "none"])
def test_license_of(meta, permissive):
    assert corpus.license_of(meta)[1] is permissive


def _code(name: str, n: int = 100) -> str:
    """n distinct lines of plausible Python."""
    return "".join(f"def {name}_{i}(x):\n    return x * {i} + {len(name)}\n" for i in range(n // 2))


def _problem(i: int) -> dict:
    return data.humaneval_problems()[i]


def _dist(site, name, files: dict, license_expr=None, classifiers=(), requires=()):
    di = site / f"{name}-1.0.dist-info"
    di.mkdir(parents=True)
    meta = ["Metadata-Version: 2.4", f"Name: {name}", "Version: 1.0"]
    meta += [f"License-Expression: {license_expr}"] if license_expr else []
    meta += [f"Classifier: {c}" for c in classifiers] + [f"Requires-Dist: {r}" for r in requires]
    (di / "METADATA").write_text("\n".join(meta) + "\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (di / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))


def _fake_site(root):
    """app -> alpha (MIT), beta (BSD: an exact copy), gamma (Apache: a near copy, a test file),
    delta (ISC: a HumanEval prompt), eps (MIT: a HumanEval solution), omega & zeta (big, MIT),
    gpl (GPL), anon (no licence)."""
    site, std = root / "site", root / "stdlib"
    base = _code("alpha")
    near = base.replace("return x * 7 + 5", "return x * 7 + 6")
    he0, he2 = _problem(0), _problem(2)
    sol = "def helper(numbers, threshold):\n" + he0["canonical_solution"]
    _dist(site, "app", {}, "MIT", requires=["alpha", "beta", "gamma", "delta", "eps", "omega",
                                            "zeta", "gpl", "anon", "nothere"])
    _dist(site, "alpha", {"alpha/core.py": base}, "MIT")
    _dist(site, "beta", {"beta/same.py": base.replace("\n", "  \r\n")}, classifiers=[
        "License :: OSI Approved :: BSD License"])
    _dist(site, "gamma", {"gamma/near.py": near, "gamma/tests/test_x.py": _code("gtest"),
                          "gamma/own.py": _code("gamma")}, "Apache-2.0")
    _dist(site, "delta", {"delta/he.py": _code("d1") + he2["prompt"], "delta/ok.py": _code("delta")}, "ISC")
    _dist(site, "eps", {"eps/sol.py": _code("e1") + sol, "eps/ok.py": _code("eps")}, "MIT")
    for big in ("omega", "zeta"):
        _dist(site, big, {f"{big}/m{i}.py": _code(f"{big}{i}", 400) for i in range(3)}, "MIT")
    _dist(site, "gpl", {"gpl/x.py": _code("gpl")}, "GPL-3.0-only")
    _dist(site, "anon", {"anon/x.py": _code("anon")})
    std.mkdir()
    (std / "os_like.py").write_text(_code("stdmod"))
    (std / "test").mkdir()
    (std / "test" / "test_os.py").write_text(_code("stdtest"))
    return site, std


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake")
    site, std = _fake_site(root)
    cfg = corpus.CorpusConfig(root="app", val_fraction=0.3)
    kw = dict(cfg=cfg, cache_dir=root / "cache", path=[str(site)], stdlib_root=std)
    return corpus.build_corpus(**kw), kw, root


def _fates(man) -> dict:
    return {path: fate for path, _, fate in man["files"]}


def test_licence_filter_skips_copyleft_and_unknown(built):
    man = built[0]["manifest"]
    assert man["skipped_licences"] == {"anon": "unknown", "gpl": "GPL-3.0-only"}
    assert not any(p.startswith(("gpl/", "anon/")) for p in _fates(man))
    assert {r["name"]: r["license"] for r in man["packages"]}["beta"] == "BSD License"


def test_exact_and_near_duplicates_keep_the_first_copy(built):
    fates = _fates(built[0]["manifest"])
    assert fates["alpha/alpha/core.py"] in ("train", "val")
    assert fates["beta/beta/same.py"] == "exact duplicate of alpha/alpha/core.py"
    assert fates["gamma/gamma/near.py"] == "near duplicate of alpha/alpha/core.py"
    assert fates["gamma/gamma/own.py"] in ("train", "val")
    assert "gamma/gamma/tests/test_x.py" not in fates and "python-stdlib/test/test_os.py" not in fates


def test_humaneval_prompt_and_solution_files_are_dropped(built):
    man = built[0]["manifest"]
    assert man["humaneval_files"] == ["delta/delta/he.py", "eps/eps/sol.py"]
    assert _fates(man)["delta/delta/ok.py"] in ("train", "val")


def test_shipped_humaneval_prompts_cannot_appear_in_the_built_corpus(built):
    tok = data.load_tokenizer()
    text = "".join(tok.decode(built[0][s].tolist(), skip_special_tokens=False) for s in ("train", "val"))
    lines = set(corpus.stripped_lines(text))
    for p in data.humaneval_problems():
        sig = next(s for s in corpus.stripped_lines(p["prompt"]) if s.startswith("def "))
        assert sig not in lines, p["task_id"]
        assert p["prompt"].strip() not in text, p["task_id"]
    needles, sols = corpus.humaneval_needles(data.humaneval_problems(), corpus.CorpusConfig())
    assert needles.isdisjoint(lines)
    assert not any(corpus.holds_humaneval(corpus.stripped_lines(text), frozenset(), [s]) for s in sols)


def test_validation_is_held_out_by_whole_package(built):
    man = built[0]["manifest"]
    splits = {}
    for path, _, fate in man["files"]:
        if fate in ("train", "val"):
            splits.setdefault(path.split("/")[0], set()).add(fate)
    assert all(len(s) == 1 for s in splits.values())
    assert splits["python-stdlib"] == {"train"}
    val = {p for p, s in splits.items() if s == {"val"}}
    assert val == set(man["val"]["packages"]) and val and val != set(splits)
    assert man["val"]["bytes"] <= 0.3 * (man["train"]["bytes"] + man["val"]["bytes"])
    assert built[0]["val"].size == man["val"]["tokens"] > 0


def test_build_is_deterministic_and_cached(built, tmp_path):
    first, kw, _ = built
    again = corpus.build_corpus(**{**kw, "cache_dir": tmp_path})
    assert again["manifest"] == first["manifest"]
    for s in ("train", "val"):
        assert np.array_equal(again[s], first[s])
    assert [p.name for p in tmp_path.iterdir()] == [first["manifest"]["key"]]


def test_near_duplicates_match_the_all_pairs_reference():
    rng = np.random.default_rng(0)
    base = [rng.integers(0, 2**62, size=rng.integers(5, 60)).astype(np.uint64) for _ in range(30)]
    sets = [np.unique(b) for b in base]
    sets += [np.unique(np.concatenate([s[: int(len(s) * f)], rng.integers(0, 2**62, 3).astype(np.uint64)]))
             for s, f in zip(sets[:20], rng.uniform(0.5, 1.0, 20))]
    cfg = corpus.CorpusConfig()
    fast, ref = corpus.near_duplicates(sets, cfg), corpus.near_duplicates_reference(sets, cfg)
    assert [f is None for f in fast] == [r is None for r in ref]
    assert sum(r is not None for r in ref) > 0


def test_split_packages_respects_budget_and_keeps_stdlib_in_train():
    sizes = {"python-stdlib": 500, **{f"p{i}": 10 * (i + 1) for i in range(20)}}
    cfg = corpus.CorpusConfig(val_fraction=0.1)
    val = corpus.split_packages(sizes, cfg)
    assert "python-stdlib" not in val and val == corpus.split_packages(dict(reversed(sizes.items())), cfg)
    assert 0 < sum(sizes[p] for p in val) <= 0.1 * sum(sizes.values())


@pytest.mark.parametrize("field, value", [("bands", 5), ("near_dup_threshold", 0.0),
                                          ("val_fraction", 1.0), ("shingle_lines", 0)])
def test_bad_config_names_the_parameter(field, value):
    with pytest.raises(ValueError, match=field):
        corpus.CorpusConfig(**{field: value})


@pytest.mark.slow
def test_the_real_built_corpus_keeps_no_humaneval_text():
    """Over the corpus built from this environment (``python -m ddtree_lab.train.corpus``):
    no kept file holds a HumanEval prompt line or solution (about a minute)."""
    cfg, problems = corpus.CorpusConfig(), data.humaneval_problems()
    packages = corpus.find_packages(cfg)
    man_path = corpus.CORPUS_DIR / corpus.cache_key(packages, problems, cfg, data.load_tokenizer()) / "manifest.json"
    if not man_path.is_file():
        pytest.skip("corpus not built here: python -m ddtree_lab.train.corpus")
    kept = {path for path, _, fate in json.loads(man_path.read_text())["files"] if fate in ("train", "val")}
    needles, sols = corpus.humaneval_needles(problems, cfg)
    disk = {path: d for p in packages for path, d in p.files}
    for path in sorted(kept):
        lines = corpus.stripped_lines(corpus.normalise(disk[path].read_text(errors="replace")))
        assert not corpus.holds_humaneval(lines, needles, sols), path
