"""docs/results.md, generated from bench/results/: every results folder's tables, each with the
command that wrote it, so the page cannot drift from the data.

    .venv/bin/python bench/results_page.py              # rewrite docs/results.md (= make results-page)
    .venv/bin/python bench/results_page.py --out PATH   # write elsewhere (test/unit/repo/test_results_page.py)

What a folder contributes (only files it holds; standard library only, no model, seconds):

* the command: ``meta.json`` ``"command"``, ``meta.txt`` ``command:``, a ``Command: `...` `` line of
  its markdown, else :data:`WRITTEN_BY` (folders written before their scripts recorded it);
* wall time, commit, date, machine: ``meta.json`` / ``meta.txt`` / ``wall.txt``;
* ``report.json`` (``pask report``): one row per run, mean accuracy with its 95% interval
  (per-category columns stay in the folder's ``report.md``);
* the command's own markdown tables (``paired.md``, ``vs-*.md``, ``compare.md``, a
  ``report.md`` that no ``report.json`` backs, ...), included as written, headings demoted.

Invariant: every non-empty folder under bench/results/ gets a section (known ones in
:data:`ORDER`, any other after them, by name); the output depends on the files only (no clock),
so regenerating an unchanged bench/results/ gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "results.md"
COMMAND = "python bench/results_page.py"

#: reading order and what each folder measures (words only: every number comes from the files)
ORDER: dict[str, str] = {
    "pask-tiny-fc-calibration-report-n200": "Calibrated PASK against every baseline, Full KV and the ablations "
    "on the tiny eval split (reference runner, prefill schedule); paired differences.",
    "pask-tiny-fc-sensitivity-n200": "Every method at 0.5 / 0.33 / 0.2 under both schedules, with the "
    "uncalibrated prior policy (reference runner, tiny eval split).",
    "pask-tiny-fc-calib-baselines-n100": "The baselines and their option variants on the calib split: "
    "which schedule and options are each baseline's strongest.",
    "pask-tiny-fc-calib-baselines-2025-n100": "The per-KV-head forms of SnapKV and PyramidKV, AdaKV and "
    "Expected Attention on the calib split, both schedules: which schedule is each one's strongest.",
    "pask-tiny-fc-calib-kvzip-n100": "KVzip (prefill, its authors' schedule) beside SnapKV per KV head on "
    "the calib split.",
    "pask-tiny-fc-calib-pask-b0.33-n100": "Calibrated PASK (its 0.33 lookup policy, the command's "
    "`policies/pask-tiny-fc.b0.33.json` then, `experiments/policies/pask-tiny-fc.lookup.b0.33.json` now) on the "
    "calib split it was chosen on, beside the baselines' calib tables.",
    "pask-tiny-fc-calib-pask-b0.2-n100": "Calibrated PASK (its 0.2 policy) on the calib split.",
    "pask-tiny-fc-server-vs-runner-n200": "Accuracy with KV persisted inside the SGLang server vs the "
    "reference runner, same policies and schedule.",
    "pask-tiny-fc-server-vs-runner-snapkv-n200": "SnapKV (per KV head, its default) served at 0.33, prefill: "
    "accuracy through the server vs the reference runner.",
    "pask-tiny-fc-server-vs-runner-adakv-n200": "AdaKV served at 0.33, prefill: accuracy through the server "
    "vs the reference runner.",
    "pask-tiny-fc-server-vs-runner-kvzip-n200": "KVzip served at 0.33, prefill (its scores from the "
    "server's reconstruction forward): accuracy through the server vs the reference runner.",
    "pask-tiny-fc-default-serving-n200": "The README's serving commands run with their defaults (the "
    "policy's operating point), through the server.",
    "pask-tiny-fc-server-required-n200": "Full KV through `make serve`, tool_choice required.",
    "pask-tiny-fc-server-auto-n200": "Full KV through `make serve`, tool_choice auto.",
    "pask-tiny-fc-radix-eval-n200": "Radix cache on vs off with PASK@0.33 on the grouped eval (every 10 "
    "requests share a tools block), server and runner, every segment mode.",
    "pask-tiny-fc-server-parity-n100": "Kept positions and generated tokens, server vs runner, continuous "
    "schedule, radix cache off.",
    "pask-tiny-fc-server-parity-radix-n100": "Kept positions and generated tokens, server vs runner, "
    "radix cache on (segment mode).",
    "pask-tiny-fc-server-parity-snapkv-n100": "SnapKV (per KV head, its default) served: kept positions, "
    "each KV head's set and tokens, server (torch backend recording the observation window per KV head, "
    "attention masked per head) vs runner, prefill schedule, 0.33.",
    "pask-tiny-fc-server-parity-adakv-n100": "AdaKV served: kept positions, each KV head's set and tokens, "
    "server vs runner, prefill schedule, 0.33.",
    "pask-tiny-fc-server-parity-kvzip-n100": "KVzip served: kept positions, each KV head's set and tokens, "
    "server (KVzip's scores by a reconstruction forward through SGLang's model, no-write mode) vs runner, "
    "prefill schedule, 0.33.",
    "pask-tiny-fc-server-parity-h2o-n100": "H2O served (accumulated attention recorded by the torch "
    "backend): kept positions and tokens, server vs runner, prefill schedule, 0.33.",
    "pask-tiny-fc-server-parity-n10": "The first, small parity run.",
    "pask-tiny-fc-server-capacity": "Serving at a fixed KV memory: concurrency, throughput and TPOT, "
    "Full KV vs PASK@0.33.",
    "pask-tiny-fc-server-capacity-ship-b0.33": "The 0.33 ship decision's serving side, one run: Full KV, the "
    "lookup (the `policies/pask-tiny-fc.b0.33.json` of its command, now "
    "`experiments/policies/pask-tiny-fc.lookup.b0.33.json`) and the learned-residual policy (shipped since as "
    "`policies/pask-tiny-fc.b0.33.json`), pools sized by each policy's `pools` block, one thread per server.",
    "pask-tiny-fc-server-capacity-shipped-b0.33": "The shipped 0.33 policy (learned residual) as the README "
    "serves it, beside the lookup it replaced, one run after the ship decision.",
    "pask-tiny-fc-server-capacity-ship-b0.5": "The same at 0.5 (the command's `policies/pask-tiny-fc.b0.5.json`: the "
    "lookup, now `experiments/policies/pask-tiny-fc.lookup.b0.5.json`; the learned one shipped since).",
    "pask-tiny-fc-server-capacity-pools-b0.33": "Pools sized by what each group holds, at 0.33: the command's "
    "`policies/pask-tiny-fc.b0.33.json` was the lookup, now `experiments/policies/pask-tiny-fc.lookup.b0.33.json`.",
    "pask-tiny-fc-server-parity-shipped-b0.2-n100": "The shipped 0.2 policy at its own operating point: kept "
    "positions per unit and tokens, server vs runner (`bash bench/shipped_parity.sh` runs every shipped policy).",
    "pask-tiny-fc-server-shared-prefix": "Shared-prefix serving (4 tools blocks x 16 queries), radix "
    "cache on for both, whole-prompt policy.",
    "pask-tiny-fc-server-shared-prefix-own-kept": "Shared-prefix serving, each request's own tokens "
    "kept (segment policy).",
    "pask-tiny-fc-server-shared-prefix-full-prefill": "Shared-prefix serving, own tokens kept and "
    "prefilled against the whole tools block (the accurate radix mode).",
    "pask-tiny-fc-server-many-blocks": "Many distinct tools blocks (Zipf-like popularity) against a KV memory "
    "for about 12 of them: Full KV's LRU vs PASK's accurate radix mode with tiers (whole while hot, "
    "demoted when cold).",
    "pask-tiny-fc-server-many-blocks-1thread": "The many-blocks bench with one intra-op thread per server "
    "(OMP_NUM_THREADS=1): steady runs on this 2-core machine, where the client shares the cores.",
    "pask-tiny-fc-server-many-blocks-catalogs": "The many-blocks bench with tool catalogs: 8 tools blocks of "
    "1,600-1,840 tokens (most of the tiny model's 2,048 positions) against Full KV memory for about 3 of them; "
    "Full KV's LRU vs PASK's tiers at the same bytes, one thread per server.",
    "qwen2.5-coder-0.5b-instruct-retention-shipped-b0.33": "The real model's retention at 0.33, the first row of "
    "its retention table to finish: of the 353 BFCL eval entries (8 categories, disjoint from calibration), the Full "
    "KV calls the shipped 0.33 policy (a lookup) still gets right, with flips and where the lost calls fail.",
    "qwen2.5-coder-0.5b-instruct-server-capacity-ship-b0.33": "The real model's ship decision at 0.33: the shipped "
    "lookup policy and the learned-residual policy of its newer calibration served side by side against Full KV "
    "at the same KV bytes (3 rounds).",
    "qwen2.5-coder-0.5b-instruct-server-capacity-ship-pools-b0.33": "The same with the learned-residual policy's "
    "per-group pools measured (`pask policy pools`, as the shipped lookup's): as many requests at once as the lookup, "
    "but slower decode steps.",
    "qwen2.5-coder-0.5b-instruct-server-capacity-ship-pools-noblas-b0.33": "The same after the learned scorer "
    "stopped calling BLAS (OpenBLAS's spinning threads had slowed every torch op of the server).",
    "qwen2.5-coder-0.5b-instruct-catalogs": "Tool catalogs on the real model (`bash bench/real_model_catalogs.sh`): "
    "BFCL simple and multiple eval entries, each with its own tools plus 20 or 50 distractor tools; retention of Full "
    "KV's correct calls per method at 0.33 and 0.2, paired against the shipped PASK policy, and where lost calls fail.",
    "pask-tiny-fc-many-blocks-accuracy-n200": "Accuracy of many-blocks traffic under memory pressure (the "
    "grouped eval, shuffled): Full KV's LRU vs PASK's tiers, with the requests that hit a demoted block.",
    "pask-tiny-fc-calibration": "The calibration run that wrote the shipped policies, and its "
    "byte-identical repeat.",
    "pask-tiny-fc-calibration-sturdy": "The sturdier calibration (600 calib entries: 360 fit, 240 held out; "
    "every member paired with KVzip; a 5-fold estimate of the search; the joint probe and fractional floors), "
    "into `experiments/policies/pask-tiny-fc.sturdy*.json`. Its report: "
    "`experiments/policies/pask-tiny-fc.sturdy.calibration.md`.",
    "qwen2.5-coder-0.5b-instruct-table-eval5": "The real model's budget table: BFCL's 8 AST categories, 5 "
    "eval entries each, reference runner, prefill; calibrated PASK against the baselines and Full KV.",
    "gpu-check-h200": "The GPU script on a lent H200: csrc's CUDA build and tests, the operators' "
    "refusals, `top_n_mask` timed, decode attention alone at Qwen3-4B's shape (see its README.md).",
    "top-n-mask-cpu": "`top_n_mask` on CPU, one thread: the numpy reference, csrc's compiled operator and the "
    "torch sort path (`ops/top_n.py`, the O(T log T) path on any device), each checked equal to the reference.",
    "gpu-check-dry-run": "The GPU script's dry run on this CPU machine: what it would run, what it would skip "
    "and why; nothing was built or run on a GPU.",
}

#: folders whose files do not record their command: the script whose default RESULTS path they are
WRITTEN_BY: dict[str, str] = {
    "pask-tiny-fc-default-serving-n200": "bash bench/default_serving_eval.sh",
    "pask-tiny-fc-radix-eval-n200": "bash bench/radix_eval.sh",
    "pask-tiny-fc-server-vs-runner-n200": "bash bench/server_vs_runner_eval.sh",
    "pask-tiny-fc-server-vs-runner-snapkv-n200": "METHOD=snapkv BUDGETS=0.33 bash bench/server_vs_runner_eval.sh",
    "pask-tiny-fc-server-vs-runner-adakv-n200": "METHOD=adakv BUDGETS=0.33 bash bench/server_vs_runner_eval.sh",
    "pask-tiny-fc-server-vs-runner-kvzip-n200": "METHOD=kvzip BUDGETS=0.33 bash bench/server_vs_runner_eval.sh",
    "pask-tiny-fc-server-required-n200": "bash bench/tiny_server_eval.sh",
    "pask-tiny-fc-server-auto-n200": "TOOL_CHOICE=auto bash bench/tiny_server_eval.sh",
    "qwen2.5-coder-0.5b-bfcl-eval25-full": "bash bench/real_model_bfcl.sh",
    "gpu-check-h200": "OUT=$OUT bash bench/gpu_check.sh (on the device machine; its OUT copied here)",
}

#: markdown written by a command, in the order a section shows it (report.md only without report.json)
TABLE_FILES = ("compare.md", "vs-strongest-baseline.md", "vs-full.md", "vs-strongest-baseline-attn.md",
               "vs-full-attn.md", "vs-snapkv.md", "paired.md", "calib.md", "eval.md", "report.md", "allocations.md",
               "retention.md")
NO_COMMAND = "not recorded"


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def budget(b) -> str:
    return "-" if b is None else f"{float(b):g}"


def report_table(report: dict) -> list[str]:
    """``pask report``'s report.json -> one markdown row per run: its key and mean [95% CI]."""
    keys = list(report.get("group_by") or [])
    head = keys + ["method", "schedule", "budget", "policy", "n", "mean % [95% CI]"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * (len(head) - 2) + "---:|---:|"]
    for row in report["rows"]:
        lo, hi = row["ci"]["mean"]
        cells = [str(row["group"].get(k, "-")) for k in keys]
        cells += [row["label"], row["schedule"] or "-", budget(row["budget"]), row["policy"], str(row["n"]),
                  f"{pct(row['mean'])} [{pct(lo)}, {pct(hi)}]"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def demote(text: str) -> list[str]:
    """A command's markdown as part of this page: headings two levels down, no trailing blanks."""
    return [("###" + line if line.startswith("#") else line) for line in text.rstrip().splitlines()]


def meta_of(folder: Path) -> tuple[str, list[str], list[str]]:
    """(command, facts, notes): what the folder's files say about the run that wrote it (notes:
    the lines of a ``meta.txt``, shown as a list)."""
    command, facts, notes = None, [], []
    if (folder / "meta.json").exists():
        meta = json.loads((folder / "meta.json").read_text())
        command = meta.get("command")
        if meta.get("wall_s") is not None:
            facts.append(f"wall time {float(meta['wall_s']):.0f} s")
        machine = meta.get("machine")
        if isinstance(machine, dict):  # pask sweep records the platform as fields
            machine = ", ".join(f"{k} {v}" for k, v in machine.items())
        for key, value in (("machine", machine), ("date", meta.get("date"))):
            if value:
                facts.append(f"{key} {value}")
        code = meta.get("git_commit") or meta.get("commit") or meta.get("code")
        if code:
            facts.append(f"code {code}")
    if (folder / "meta.txt").exists():
        for line in (folder / "meta.txt").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "command" and command is None:
                command = value.strip()
            elif line.strip():
                notes.append(f"{key}: `{value.strip()}`" if key == "calibrate" else line.strip())
    if (folder / "wall.txt").exists():
        facts.append((folder / "wall.txt").read_text().strip())
    if command is None:
        for name in TABLE_FILES:
            m = (folder / name).exists() and re.search(r"Command: `([^`]+)`", (folder / name).read_text())
            if m:
                command = m.group(1)
                break
    return command or WRITTEN_BY.get(folder.name, NO_COMMAND), facts, notes


def section(folder: Path) -> list[str]:
    rel = folder.relative_to(ROOT).as_posix()
    command, facts, notes = meta_of(folder)
    out = [f"## {folder.name}", ""]
    if folder.name in ORDER:
        out += [ORDER[folder.name], ""]
    out += [f"Written by `{command}` into `{rel}/`."]
    out += [f"Run: {'; '.join(facts)}.", ""] if facts else [""]
    if notes:
        out += ["`meta.txt`:", ""] + [f"- {line}" for line in notes] + [""]
    if (folder / "report.json").exists():
        report = json.loads((folder / "report.json").read_text())
        exp = ", ".join(f"{k}={v}" for k, v in report["experiment"].items())
        out += [f"`report.json` ({exp}); per-category columns in [`report.md`](../{rel}/report.md):", ""]
        out += report_table(report) + [""]
    for name in TABLE_FILES:
        path = folder / name
        if not path.exists() or (name == "report.md" and (folder / "report.json").exists()):
            continue
        out += [f"[`{name}`](../{rel}/{name}):", ""] + demote(path.read_text()) + [""]
    for png in sorted(folder.glob("*.png")):
        out += [f"Plot: [`{png.name}`](../{rel}/{png.name})", ""]
    return out


def folders() -> list[Path]:
    """Every non-empty folder of bench/results/, in :data:`ORDER`, then the others by name."""
    found = {p.name: p for p in RESULTS.iterdir() if p.is_dir() and any(p.iterdir())}
    return [found[n] for n in ORDER if n in found] + [found[n] for n in sorted(found) if n not in ORDER]


def page() -> str:
    out = ["# Results", "",
           f"Generated from `bench/results/` by `{COMMAND}` (`make results-page`); do not edit by hand.",
           "`test/unit/repo/test_results_page.py` fails when this page and the folders differ. Each section is one",
           "folder: the command that wrote it, how long it ran, and its tables (accuracy in % of exact",
           "calls, 95% bootstrap intervals). The model is `models/pask-tiny-fc` unless a section says",
           "otherwise; `b` is the fraction of Full KV kept.", ""]
    sections = folders()
    out += [f"- [{f.name}](#{f.name.replace('.', '')})" for f in sections] + [""]
    for folder in sections:
        out += section(folder)
    others = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    if others:
        out += ["## Other files", ""]
        out += [f"- [`{name}`](../bench/results/{name})" for name in others] + [""]
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=PAGE, help="where to write the page (default docs/results.md)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page())
    print(f"results_page: wrote {args.out} ({len(folders())} folders)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
