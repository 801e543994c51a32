"""``ddtree-lab`` command line (also ``python -m ddtree_lab``)."""
from __future__ import annotations

import argparse
import json

import torch


def _cmd_train_tokenizer(args):
    from . import data
    tok = data.train_tokenizer(data.corpus_texts()["train"], vocab_size=args.vocab_size)
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {data.TOKENIZER_PATH}")


def _cmd_train_target(args):
    from .targets import train_target
    man = train_target(args.arch, args.preset, max_minutes=args.max_minutes)
    print(json.dumps({k: man[k] for k in ("final_val_loss", "parameters", "train_time_s")}))


def _cmd_notebooks(args):
    from .notebooks import run_all
    run_all(smoke=args.smoke)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ddtree-lab", description=__doc__)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("train-tokenizer", help="train the byte-level BPE tokenizer into data/")
    s.add_argument("--vocab-size", type=int, default=4096)
    s.set_defaults(func=_cmd_train_tokenizer)
    s = sub.add_parser("train-target", help="train a target on the stdlib corpus (resumable)")
    s.add_argument("--arch", choices=["gdn", "mla"], required=True)
    s.add_argument("--preset", choices=["default", "quick", "toy"], default="default")
    s.add_argument("--max-minutes", type=float, default=None, help="wall-clock cap")
    s.set_defaults(func=_cmd_train_target)
    s = sub.add_parser("notebooks", help="execute every notebook headless (figures -> figures/)")
    s.add_argument("--smoke", action="store_true", help="run them small (as the tests do)")
    s.set_defaults(func=_cmd_notebooks)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.func(args)


if __name__ == "__main__":
    main()
