"""The plain twins live in one module, ``core/naive.py``, beside the fast ones (read with ``ast``):
no other core module defines a ``*_reference`` function or method, no fast module imports
``naive`` (it is never on the decoding path), and every twin names a fast function that exists."""
import ast
import importlib
import inspect

from ddtree_lab.common import ROOT
from ddtree_lab.core import naive

CORE = ROOT / "ddtree_lab" / "core"
FAST = sorted(p for p in CORE.glob("*.py") if p.name != "naive.py")

# twin in naive -> the fast function it is the plain form of (module.attribute[.attribute])
TWINS = {"build_tree": "tree.build_tree", "ancestor_mask": "tree.ancestor_mask", "accept": "tree.accept",
         "batch_buffers": "verify.batch_buffers",
         "tree_logits": "verify.tree_logits", "commit": "verify.commit", "allocate_budgets": "allocate.allocate_budgets",
         "scores": "conditional.ConditionalDraft.scores",
         "ranked_children": "conditional.ConditionalDraft.ranked_children",
         "build_conditional_tree": "conditional.build_conditional_tree", "propose": "drafter.DFlashDrafter.draft"}


def reference_defs(source: str) -> list[str]:
    """Names of the functions and methods (any depth) of ``source`` that end in ``_reference``."""
    return [n.name for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.endswith("_reference")]


def imports_naive(source: str) -> bool:
    """Whether ``source`` imports core's ``naive`` module or a name from it, in any spelling (a
    family's own plain form, ``families/<family>/naive.py``, is not it)."""
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import) and any(a.name.split(".")[-1] == "naive" and "families" not in a.name for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom):
            if "families" in (n.module or ""):
                continue
            if (n.module or "").split(".")[-1] == "naive":
                return True
            if any(a.name == "naive" for a in n.names):
                return True
    return False


def test_the_twins_have_one_module():
    assert (CORE / "naive.py").is_file()
    assert len(FAST) > 15 and not any(p.name.startswith("test_") for p in FAST)
    found = {p.name: reference_defs(p.read_text()) for p in FAST}
    assert not {k: v for k, v in found.items() if v}, f"plain twins belong in core/naive.py: {found}"


def test_no_fast_module_imports_naive():
    bad = [p.name for p in FAST if imports_naive(p.read_text())]
    assert not bad, f"core modules importing naive (the twins are for the tests): {bad}"


def test_every_twin_names_its_fast_function():
    public = {name for name, f in vars(naive).items()
              if inspect.isfunction(f) and f.__module__ == naive.__name__ and not name.startswith("_")}
    assert public == set(TWINS)
    for twin, fast in TWINS.items():
        module, attr = fast.split(".", 1) if not fast.startswith("families.") else fast.rsplit(".", 1)
        obj, attrs = importlib.import_module(f"ddtree_lab.core.{module}"), attr.split(".")
        for attr in attrs:
            obj = getattr(obj, attr)
        assert callable(obj), fast
        assert f"``{twin}``" in naive.__doc__, f"naive's table does not list {twin}"


# a family's own twins, beside its fast form (issue 65): families/gdn/naive.py -> families/gdn/wy.py
GDN_TWINS = {"tree_conv": "tree_conv", "gated_delta": "gated_delta_wy", "tree_layer_batch": "tree_layer_batch",
             "tree_conv_batch": "tree_conv_batch", "gated_delta_wy_batch": "gated_delta_wy_batch"}


def test_the_gdn_twins_sit_beside_the_fast_form_they_mirror():
    from ddtree_lab.core.families.gdn import naive as gdn_naive, wy
    for twin, fast in GDN_TWINS.items():
        assert callable(getattr(gdn_naive, twin)) and callable(getattr(wy, fast)), twin
        assert f"``{twin}``" in gdn_naive.__doc__ and f"``wy.{fast}``" in gdn_naive.__doc__, twin
        assert not hasattr(naive, twin), f"{twin} belongs beside the GDN fast form, not in core/naive.py"


def test_the_greps_see_every_spelling():
    assert reference_defs("def f_reference(): pass\nclass A:\n    def g_reference(self): pass\n"
                          "def h():\n    def inner_reference(): pass\n") == ["f_reference", "g_reference",
                                                                              "inner_reference"]
    assert reference_defs("def reference(): pass\nx_reference = 1\n") == []
    for spelling in ("from . import naive", "from .naive import build_tree", "from ddtree_lab.core import naive",
                     "from ddtree_lab.core.naive import accept", "import ddtree_lab.core.naive",
                     "from . import tree, naive as nv", "def f():\n    from . import naive\n"):
        assert imports_naive(spelling), spelling
    assert not imports_naive("from . import tree\nfrom .spec import NaiveMode\nnaive = 1\n")
    assert not imports_naive("from .families.gdn import naive as gdn_naive\n")
