"""The tag log: JSON lines the plugin writes so a request's tags can be read back.

Enabled by ``--pask-tag-log DIR`` (or ``$SGLANG_PASK_TAG_LOG``) with a policy on. Each process
appends to its own file, so lines never interleave:

* ``prompt-<pid>.jsonl`` (HTTP process, at admission):
  ``{"rid", "part": "prompt", "token_ids", "classes", "notes"}``
* ``output-<pid>.jsonl`` (scheduler, when the request's KV is released):
  ``{"rid", "part": "output", "output_ids", "token_ids", "classes", "stable"}`` where
  ``token_ids`` are the tokens the grammar accepted (the tracker's input) and ``classes`` their
  tags, aligned one to one.
"""

from __future__ import annotations

import glob
import json
import os

from sglang_pask.environ import envs


def tag_log_dir() -> str | None:
    return envs.SGLANG_PASK_TAG_LOG.get()


def write(kind: str, record: dict) -> None:
    """Append one record to this process's ``<kind>-<pid>.jsonl`` (no-op when the log is off)."""
    folder = tag_log_dir()
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{kind}-{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read(folder: str) -> dict[str, dict[str, dict]]:
    """``{rid: {"prompt": record, "output": record}}`` from every file in ``folder``."""
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                out.setdefault(rec["rid"], {})[rec["part"]] = rec
    return out
