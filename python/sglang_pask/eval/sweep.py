"""``pask sweep``: methods x schedules x budgets on one model and data set, one command from the
runs to the published table.

Cells: ``full`` once (budget 1.0, its default schedule); every other method at every budget under
every schedule. Method specs are ``NAME[:KEY=VALUE]...`` (:func:`~sglang_pask.eval.records.parse_method_spec`),
so ``h2o`` and ``h2o:normalize=true`` are two cells. Each cell is a ``pask eval``-compatible run
directory ``OUT/<cell>`` (same run.json, results.jsonl, summary.json; resumable: finished entries are
skipped, so rerunning the command finishes what is missing), scored through the in-process API's
path (:func:`sglang_pask.eval.harness.run_eval` over the hf backend, one model per process).

Shared prefill (the default with ``jobs == 1``; ``--no-share-prefill`` runs cell by cell): every
cell whose segment rule is none runs the same prompt forward (compression comes after it), so the
sweep goes entry by entry: for each entry, the cells that still lack it continue from one forward
per attention-statistics kind (the runner's :class:`~sglang_pask.hf.memo.PrefillMemo`: a copy of
its cache each) and write their records through the harness's own scoring and files
(:func:`~sglang_pask.eval.harness.score_entry`, ``open_run``, ``append_record``,
``write_summary``). The records equal the cell-by-cell ones but for timings (``latency_s``).
Cells with an active segment rule (a policy with ``segment=system``) run cell by cell after.

``jobs`` worker processes (spawned) each load the model once and take cells from a queue (cell by
cell, no shared prefill); with more than one job each worker runs torch on one thread (the cores
are shared). Progress: one bar over every pending (cell, entry). At the end: ``pask report`` of
all cells into ``RESULTS`` (report.md, report.json with intervals, accuracy_vs_budget.png) and
``RESULTS/meta.json`` (the command line, git commit, date, wall time in total and per cell, cores,
jobs, whether the prefill was shared).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_pask.eval.records import method_label, parse_method_spec

__all__ = ["Cell", "plan", "run_sweep"]


@dataclass(frozen=True)
class Cell:
    method: str
    options: dict = field(default_factory=dict, hash=False)
    schedule: str | None = None
    budget: float | None = None

    @property
    def name(self) -> str:
        """The run directory's name, e.g. ``h2o+normalize=true-prefill-0.33`` (``full``: ``full``); a
        path among the options (``kvzap:scorer=policies/x.safetensors``) has its ``/`` spelt ``_``,
        so each cell stays one directory (two cells that then collide are refused by :func:`plan`)."""
        stem = "+".join([self.method] + [f"{k}={json.dumps(v) if not isinstance(v, str) else v.replace('/', '_')}"
                                         for k, v in sorted(self.options.items())])
        if self.budget is None:
            return stem
        return f"{stem}-{self.schedule}-{self.budget:g}"

    @property
    def label(self) -> str:
        return method_label(self.method, self.options)


def plan(methods: list[str], budgets: list[float], schedules: list[str]) -> list[Cell]:
    """The cells of a sweep, in command-line order (full first when listed)."""
    if not methods or not budgets or not schedules:
        raise ValueError("--methods, --budgets and --schedules each need at least one value")
    for b in budgets:
        if not 0.0 < b <= 1.0:
            raise ValueError(f"--budgets: {b} is not in (0, 1]")
    cells, seen = [], set()
    for spec in methods:
        name, opts = parse_method_spec(spec)
        if name == "full":
            todo = [Cell("full", opts)]
        else:
            todo = [Cell(name, opts, s, b) for s in schedules for b in budgets]
        for c in todo:
            if c.name in seen:
                raise ValueError(f"cell {c.name} is listed twice")
            seen.add(c.name)
            cells.append(c)
    return cells


# ---- one cell -----------------------------------------------------------------------------------

_WORKER: dict = {}


def _init(model: str, threads: int | None, queue) -> None:
    """Per process: load the model once (and pin torch's threads when the cores are shared)."""
    import torch

    from sglang_pask.eval.api import load_runner

    if threads is not None:
        torch.set_num_threads(threads)
    _WORKER.update(runner=load_runner(model), queue=queue)


def _cell_backend(job: dict):
    """The cell's backend (bound to the loaded model) and run config: one place for both paths."""
    from sglang_pask.eval.hf_backend import HFBackend
    from sglang_pask.eval.records import run_config

    cell: Cell = job["cell"]
    policy = job["policy"] if cell.method == "pask" else None
    backend = HFBackend(_WORKER["runner"], cell.method, cell.budget, policy, schedule=cell.schedule,
                        method_options=cell.options)
    config = run_config(job["data"], method=cell.method, budget=cell.budget, schedule=cell.schedule,
                        policy=policy, method_options=cell.options)
    return backend, config


def _cell_meta(cell: "Cell", wall_s: float, run: int, entries: int, summary: dict, shared: bool) -> dict:
    return {"cell": cell.name, "method": cell.label, "schedule": cell.schedule, "budget": cell.budget,
            "wall_s": round(wall_s, 2), "entries_run": run, "entries": entries, "mean": summary.get("mean"),
            "prefill_shared": shared}


def _run_cell(job: dict) -> dict:
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings, run_eval

    cell: Cell = job["cell"]
    t0 = time.perf_counter()
    entries = load_spec(job["data"])
    backend, config = _cell_backend(job)
    queue = _WORKER.get("queue")
    count = [0]

    def tick(_rec):
        count[0] += 1
        if queue is not None:
            queue.put(1)

    summary = run_eval(entries, backend, job["out"], Settings(**job["settings"]), config, 1, False, on_result=tick)
    return _cell_meta(cell, time.perf_counter() - t0, count[0], len(entries), summary, False)


# ---- entry by entry, one prompt forward per statistics kind -------------------------------------


#: bytes of prompt forwards the entry-by-entry path keeps: the current entry's few (one per
#: statistics kind) fit many times over; older entries leave first (LRU)
SHARED_MEMO_BYTES = 1 << 30


def _run_shared(work: list[dict]) -> tuple[list[dict], float]:
    """Every cell of ``work`` (one data set and settings), entry by entry, with the loaded runner's
    prefill memo on (:class:`sglang_pask.hf.memo.PrefillMemo`: the first cell of each statistics
    kind runs the entry's prompt forward, the others continue from a copy); cells with an active
    segment rule (which never use the memo) run cell by cell after. Returns the cells' meta
    (``wall_s``: the cell's own work, prompt forwards not counted) and the seconds of the forwards."""
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings, append_record, open_run, score_entry, write_summary
    from sglang_pask.hf.memo import PrefillMemo

    if not work:
        return [], 0.0
    entries = load_spec(work[0]["data"])
    settings = Settings(**work[0]["settings"])
    runner = _WORKER["runner"]
    memo = runner.memo = PrefillMemo(SHARED_MEMO_BYTES)  # bound runners share it (bind_runner)
    runs, alone = [], []
    for w in work:
        backend, config = _cell_backend(w)
        if backend.runner.segment_rule.active:  # compresses inside its forward: not shareable
            alone.append(w)
            continue
        config, done = open_run(w["out"], backend, settings, config)  # run.json first, as run_eval
        runs.append({"job": w, "backend": backend, "config": config, "done": done, "run": 0, "wall_s": 0.0})
    try:
        for e in entries:
            for r in runs:
                if e.id in r["done"]:
                    continue
                t0, f0 = time.perf_counter(), memo.forward_s
                rec = score_entry(e, r["backend"], settings)  # BackendError: the hf backend raises none
                with open(Path(r["job"]["out"]) / "results.jsonl", "a", encoding="utf-8") as f:
                    append_record(f, rec)
                r["done"][rec["id"]] = rec
                r["run"] += 1
                r["wall_s"] += time.perf_counter() - t0 - (memo.forward_s - f0)
                _WORKER["queue"].put(1)
    finally:
        runner.memo = None
        for r in runs:
            r["backend"].close()
    metas = [_cell_meta(r["job"]["cell"], r["wall_s"], r["run"], len(entries),
                     write_summary(r["job"]["out"], entries, r["done"], r["config"]), True) for r in runs]
    return metas + [_run_cell(w) for w in alone], memo.forward_s


# ---- the sweep ----------------------------------------------------------------------------------


def _pending(out: Path, ids: set[str]) -> int:
    from sglang_pask.eval.harness import read_results

    return len(ids - set(read_results(out / "results.jsonl")))


def run_sweep(*, model: str, data: str, methods: list[str], budgets: list[float], schedules: list[str],
              out: str | Path, results: str | Path | None = None, policy: str | None = None,
              settings: dict | None = None, jobs: int = 1, progress: bool = True,
              command: str | None = None, share_prefill: bool = True) -> dict:
    """Run every cell (see the module docstring); returns the metadata written to meta.json.
    ``share_prefill``: with ``jobs == 1``, entry by entry with one prompt forward per statistics
    kind (False: cell by cell); ignored with more jobs (always cell by cell)."""
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.report import write_report

    cells = plan(methods, budgets, schedules)
    if any(c.method == "pask" for c in cells) and not policy:
        raise ValueError("pask needs a policy: add --policy FILE")
    if not os.path.isfile(os.path.join(model, "config.json")):
        raise ValueError(f"--model {model!r} is not a model folder (no config.json)")
    if jobs < 1:
        raise ValueError("--jobs must be >= 1")
    out = Path(out)
    results = Path(results) if results is not None else out / "report"
    out.mkdir(parents=True, exist_ok=True)
    ids = {e.id for e in load_spec(data)}
    settings = dict(settings or {})
    work = [{"cell": c, "data": data, "policy": policy, "settings": settings, "out": str(out / c.name)}
            for c in cells]
    total = sum(_pending(Path(w["out"]), ids) for w in work)
    t0 = time.perf_counter()
    bar = _bar(total, progress)
    done: list[dict] = []
    shared = share_prefill and jobs == 1
    forward_s = None
    if jobs == 1:
        _init(model, None, None)
        _WORKER["queue"] = _Ticker(bar)
        try:
            if shared:
                done, forward_s = _run_shared(work)
            else:
                done = [_run_cell(w) for w in work]
        finally:
            _WORKER.clear()
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        stop = threading.Event()
        drain = threading.Thread(target=_drain, args=(queue, bar, stop), daemon=True)
        drain.start()
        try:
            with ctx.Pool(min(jobs, len(work)), initializer=_init, initargs=(model, 1, queue)) as pool:
                done = list(pool.imap_unordered(_run_cell, work))
        finally:
            stop.set()
            drain.join()
            queue.close()
            queue.join_thread()
    if bar is not None:
        bar.close()
    order = {c.name: i for i, c in enumerate(cells)}
    done.sort(key=lambda d: order[d["cell"]])
    rep = write_report([w["out"] for w in work], results)
    meta = {
        "command": command or shlex.join(["pask", *sys.argv[1:]]),
        "git_commit": _git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - t0, 2),
        "cells": done,
        "machine": {"cpu_cores": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "jobs": jobs, "torch_threads_per_job": 1 if jobs > 1 else "default",
        "prefill_shared": shared,
        "shared_forward_s": None if forward_s is None else round(forward_s, 2),
        "model": model, "data": data, "policy": policy, "settings": settings, "runs": str(out),
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    meta["report"] = rep
    return meta


class _Ticker:
    """A stand-in for the workers' queue when the sweep runs in-process."""

    def __init__(self, bar):
        self.bar = bar

    def put(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)


def _drain(queue, bar, stop: threading.Event) -> None:
    import queue as q

    while not stop.is_set() or not queue.empty():
        try:
            n = queue.get(timeout=0.2)
        except q.Empty:
            continue
        if bar is not None:
            bar.update(n)


def _bar(total: int, progress: bool):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="pask sweep", unit="entry", file=sys.stderr, dynamic_ncols=True)


def _git_commit() -> str | None:
    """HEAD's commit of the source tree, with ``+dirty`` when tracked files differ from it (the long
    runs' resume state under ``experiments/runs/`` is data those runs append to, not code: left out)."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)experiments/runs"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")
