"""The results layer's key of a plug-in rule or walk: a built-in by its name, one's own by its
name and a hash of its definition (source, parameters, the plain globals it reads)."""
import itertools
from pathlib import Path

from ddtree_lab.core import rules
from ddtree_lab.experiments.plumbing.meaning import definition_hash, plugin_key


def top2_per_depth(draft, root_token, budget):
    """Every node gets the 2 best tokens of the next depth, breadth first, until the budget."""
    paths = [p for d in range(1, len(draft.logits) + 1) for p in itertools.product(range(2), repeat=d)]
    return rules.from_rank_paths(draft.logits, root_token, paths[:budget])


def test_a_plugin_key_is_its_name_and_a_hash_of_its_definition():
    def make(k):
        def top_k(draft, root_token, budget, width=k):
            return top2_per_depth(draft, root_token, budget)
        return top_k
    assert plugin_key(rules.as_rule(make(2))) == plugin_key(rules.as_rule(make(2))) != plugin_key(rules.as_rule(make(3)))
    assert plugin_key(rules.as_rule(make(2))).startswith("top_k-") and plugin_key(rules.best_first) == "unary"
    assert plugin_key(rules.target_matching) == "target" and plugin_key(rules.as_walk(top2_per_depth)).startswith("top2_per_depth-")
    named = lambda d, r, b: None  # noqa: E731
    named.name = "mine"
    assert plugin_key(rules.as_rule(named)).startswith("mine-")
    assert definition_hash(top2_per_depth) == definition_hash(top2_per_depth)


def test_a_plugin_key_follows_the_plain_globals_it_reads():
    scope = {}
    exec("WIDTH = 2\ndef wide(draft, root_token, budget):\n    return WIDTH\n", scope)
    before = plugin_key(rules.as_rule(scope["wide"]))
    scope["WIDTH"] = 3
    assert plugin_key(rules.as_rule(scope["wide"])) != before


def test_results_concerns_stay_out_of_core():
    """The semantics version and the hashing of sources are the results layer's: no module of
    core (tests aside) reads a source, hashes one or names the version."""
    core = rules.__file__.rsplit("/", 1)[0]
    found = {p.name for p in Path(core).rglob("*.py") if "tests" not in p.parts
             and any(w in p.read_text() for w in ("getsource", "stable_hash", "hashlib", "SEMANTICS"))}
    assert not found and not (Path(core) / "semantics.py").exists(), found
