"""Studies: each one question of the lab, measured into a store (bench, quality, DFlash 2, ...)."""
import argparse


def smoke_main(study, doc: str, argv=None) -> None:
    """A study's command line, ``python -m ddtree_lab.experiments.studies.NAME [--smoke]``:
    ``study(smoke)`` with ``doc`` (the module's docstring) as its help."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="one prompt, few tokens, into data/results/smoke/")
    study(p.parse_args(argv).smoke)
