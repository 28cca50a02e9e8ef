"""One harness for every backend: prompt -> backend -> decode -> BFCL checker -> files in DIR.

Files in the output directory:
  ``run.json``       the run's settings, written first; a resume with different settings is refused
                     (``limit``, ``workers`` and ``base_url`` may change between resumes)
  ``results.jsonl``  one record per finished entry, appended and flushed as each finishes:
                     ``{"id", "category", "raw": {"text", "tool_calls"}, "decoded", "valid",
                     "error_type", "error", "meta"}``
  ``summary.json``   summary.summarize over this invocation's entries (also after a fatal error,
                     then with ``"complete": false`` and the error under ``"fatal_error"``)
  ``summary.md``     summary.markdown_table
Resumable: entries whose id is already in results.jsonl are skipped; a torn last line (a killed
run) is ignored and that entry is run again.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from sglang_pask.eval.base import Backend, BackendError, EntryError, Generation, Request
from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.checker import check
from sglang_pask.eval.data import Entry
from sglang_pask.eval.decode import TRUNCATED, decode_response
from sglang_pask.eval.summary import markdown_table, summarize

__all__ = ["Settings", "build_request", "score", "score_entry", "read_results", "open_run", "append_record",
           "write_summary", "run_eval", "RunAborted"]

_MUTABLE_KEYS = ("limit", "workers", "base_url", "policy_file")  # the policy itself is keyed by its hash


@dataclass(frozen=True)
class Settings:
    """Decoding settings, identical for every backend."""

    max_tokens: int = 512
    temperature: float = 0.0
    tool_choice: str = "auto"
    enable_thinking: bool = False

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.tool_choice not in ("auto", "required"):
            raise ValueError(f"tool_choice must be auto or required, not {self.tool_choice!r}")


class RunAborted(RuntimeError):
    """The backend failed mid-run; finished entries are on disk and summary.json says so."""


def build_request(entry: Entry, settings: Settings) -> tuple[Request, dict[str, str]]:
    """The request every backend gets for ``entry``, and the tool-name map for decoding."""
    tools, name_map = bfcl_to_openai_tools(list(entry.prompt_functions))
    req = Request(
        entry.id,
        [dict(m) for m in entry.messages],
        tools,
        settings.max_tokens,
        settings.temperature,
        settings.tool_choice,
        settings.enable_thinking,
    )
    return req, name_map


def _record(entry: Entry, raw: dict, decoded, valid: bool, error_type: str, error: str, meta: dict) -> dict:
    return {
        "id": entry.id,
        "category": entry.category,
        "raw": raw,
        "decoded": decoded,
        "valid": valid,
        "error_type": error_type,
        "error": error,
        "meta": meta,
    }


def score(entry: Entry, gen: Generation, name_map: dict[str, str]) -> dict:
    """Decode and check one generation; malformed output is an invalid record, never an exception."""
    raw = {"text": gen.text, "tool_calls": gen.tool_calls}
    dec = decode_response(gen.text, gen.tool_calls, name_map)
    if dec.calls is None:
        kind, detail = dec.error_type, dec.error
        if not (gen.text or "").strip() and not gen.tool_calls and gen.meta.get("finish_reason") == "length":
            # a server drops a tool call cut off at max_tokens and answers with empty text
            kind, detail = TRUNCATED, "empty output at max_tokens (the server dropped an incomplete tool call)"
        return _record(entry, raw, None, False, kind, detail, gen.meta)
    v = check(list(entry.functions), dec.calls, list(entry.ground_truth), entry.category)
    return _record(entry, raw, dec.calls, v.valid, v.error_type, v.error, gen.meta)


def score_entry(entry: Entry, backend: Backend, settings: Settings) -> dict:
    """The results.jsonl record of one entry: request -> backend -> decode -> checker. The one
    scoring path: :func:`run_eval` and the in-process API (:func:`sglang_pask.eval.api.score`)
    both call it. A failure confined to the entry is an invalid record; raises BackendError only."""
    try:
        req, name_map = build_request(entry, settings)
    except ValueError as err:
        return _record(entry, None, None, False, "tools:malformed_doc", str(err), {})
    try:
        gen = backend.generate(req)
    except EntryError as err:
        return _record(entry, None, None, False, f"backend:{err.kind}", str(err), {})
    return score(entry, gen, name_map)


def read_results(path: Path) -> dict[str, dict]:
    """id -> record from a results.jsonl; unparsable lines (a torn last write) are skipped."""
    out: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "id" in rec:
                out[rec["id"]] = rec
    return out


def _check_resume(out: Path, config: dict) -> None:
    run_file = out / "run.json"
    if run_file.exists():
        old = json.loads(run_file.read_text(encoding="utf-8"))
        # options that resolve to the same method (every field, "method") are the same run: e.g.
        # a default spelt out after it changed (`--method-opt per_head=false` for SnapKV)
        same = ("method_options",) if "method" in old and old.get("method") == config.get("method") else ()
        diff = sorted(k for k in set(old) | set(config)
                      if k not in _MUTABLE_KEYS + same and old.get(k) != config.get(k))
        if diff:
            pairs = "; ".join(f"{k}: {old.get(k)!r} -> {config.get(k)!r}" for k in diff)
            raise ValueError(f"{out} holds a run with other settings ({pairs}); use another --out")
    run_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def open_run(out_dir: str | Path, backend: Backend, settings: Settings, config: dict) -> tuple[dict, dict]:
    """Start or resume the run in ``out_dir``: the full config (``config`` + settings + the
    backend's ``describe()``) is checked against run.json (a resume with other settings is
    refused) and written there, and a torn last line of results.jsonl is ended so the next record
    starts on its own line. Returns ``(config, done)``, ``done``: id -> the records already there."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {**config, **asdict(settings), **backend.describe()}
    _check_resume(out, config)
    res_path = out / "results.jsonl"
    if res_path.exists() and res_path.stat().st_size and not res_path.read_bytes().endswith(b"\n"):
        with open(res_path, "a", encoding="utf-8") as f:
            f.write("\n")  # a torn last line stays unparsable and separate
    return config, read_results(res_path)


def append_record(f, rec: dict) -> None:
    """Append one record to an open results.jsonl and flush it (a finished entry is on disk)."""
    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    f.flush()


def write_summary(out_dir: str | Path, entries: list[Entry], done: dict, config: dict,
                  fatal: BaseException | None = None) -> dict:
    """summary.json and summary.md over the records of ``entries`` in ``done``; returns the summary."""
    out = Path(out_dir)
    ids = {e.id for e in entries}
    summary = summarize([r for i, r in done.items() if i in ids], config, dict(Counter(e.category for e in entries)))
    if fatal:
        summary["fatal_error"] = str(fatal)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(markdown_table(summary), encoding="utf-8")
    return summary


def run_eval(
    entries: list[Entry],
    backend: Backend,
    out_dir: str | Path,
    settings: Settings,
    config: dict,
    workers: int = 1,
    progress: bool = True,
    on_result=None,
) -> dict:
    """Run, score and record every entry not yet in ``out_dir``; return the summary.
    ``on_result(record)``: called after each new record is on disk (e.g. a sweep's progress bar).

    Raises RunAborted (after writing the partial summary) if the backend fails fatally.
    """
    out = Path(out_dir)
    config, done = open_run(out, backend, settings, config)
    res_path = out / "results.jsonl"
    pending = [e for e in entries if e.id not in done]
    if backend.max_workers is not None:
        workers = min(workers, backend.max_workers)
    stop = threading.Event()
    fatal: list[BaseException] = []
    lock = threading.Lock()

    def one(e: Entry):
        if stop.is_set():
            return None
        try:
            return score_entry(e, backend, settings)
        except BackendError as err:
            with lock:
                fatal.append(err)
            stop.set()
            return None

    bar = _bar(len(pending), progress)
    try:
        with open(res_path, "a", encoding="utf-8") as f, ThreadPoolExecutor(max(1, workers)) as pool:
            futures = [pool.submit(one, e) for e in pending]
            try:
                for fut in as_completed(futures):
                    rec = fut.result()
                    if rec is None:
                        continue
                    append_record(f, rec)
                    done[rec["id"]] = rec
                    if on_result is not None:
                        on_result(rec)
                    if bar is not None:
                        bar.update(1)
            except BaseException:  # a bug or Ctrl-C: queued entries end at once, in-flight ones finish
                stop.set()
                raise
    finally:
        if bar is not None:
            bar.close()
        backend.close()
    summary = write_summary(out, entries, done, config, fatal[0] if fatal else None)
    if fatal:
        ids = {e.id for e in entries}
        n_done = sum(1 for i in done if i in ids)
        raise RunAborted(
            f"{fatal[0]}; {n_done}/{len(entries)} entries finished and kept in {res_path} "
            "(rerun the same command to resume)"
        )
    return summary


def _bar(total: int, progress: bool):
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        return None
    return tqdm(total=total, desc="pask eval", unit="entry", file=sys.stderr, dynamic_ncols=True)
