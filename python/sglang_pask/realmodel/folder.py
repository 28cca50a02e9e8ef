"""The real model's folder: built once (fetch -> convert -> card -> stamp), then left alone.

Invariant: the stamp file is written last and holds the joined GGUF's sha256; a folder counts as
complete only when the stamp holds the pinned hash and every file the folder needs is there.
"""

from __future__ import annotations

import time
from pathlib import Path

from sglang_pask.realmodel.fetch import GGUF_SHA256, fetch_gguf

DEFAULT_OUT = Path("models/qwen2.5-coder-0.5b-instruct")
DEFAULT_CACHE = Path(".cache/real-model")
STAMP = ".pask-complete"
REQUIRED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "MODEL_CARD.md")


def complete(out: Path, want_sha256: str = GGUF_SHA256) -> bool:
    stamp = out / STAMP
    return (stamp.is_file() and stamp.read_text().strip() == want_sha256
            and all((out / f).is_file() for f in REQUIRED))


def write_stamp(out: Path, sha256: str) -> None:
    (out / STAMP).write_text(sha256 + "\n")


def build(out: Path = DEFAULT_OUT, cache: Path = DEFAULT_CACHE) -> str:
    """Build ``out`` unless complete; the one-line summary of what happened."""
    if complete(out):
        return f"{out}: complete (GGUF sha256 {GGUF_SHA256[:12]}...), nothing to do"
    from sglang_pask.realmodel import card
    from sglang_pask.realmodel.convert import convert

    t0 = time.perf_counter()
    gguf = fetch_gguf(cache)
    fetch_s = time.perf_counter() - t0
    print(f"fetch-model: {gguf} verified (sha256 {GGUF_SHA256}) in {fetch_s:.0f} s; converting", flush=True)
    record = convert(gguf, out, out.with_name(out.name + ".partial"))
    card.write(out, record, {"fetch_s": fetch_s, "total_s": time.perf_counter() - t0})
    write_stamp(out, GGUF_SHA256)
    speeds = ", ".join(f"{s.dtype} {s.load_s + s.forward_s:.1f} s" for s in record["speeds"])
    return (f"{out}: built in {time.perf_counter() - t0:.0f} s ({record['dtype']}; load+forward {speeds}); "
            f"see {out / 'MODEL_CARD.md'}")
