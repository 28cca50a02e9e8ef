"""``pask eval``, ``pask report`` and ``pask synth``. Heavy imports stay inside the run functions."""

from __future__ import annotations

import argparse
import sys

from sglang_pask.cli import command
from sglang_pask.eval import BACKENDS


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", required=True,
        help="bfcl:all | bfcl:CAT[,CAT...] (+ :eval=K or :calib=K[:seed=S]: a seeded K-per-category subset, "
        "or the rest) | synthetic:SPLIT:N[:PROFILE] | file:DIR",
    )
    p.add_argument("--backend", choices=sorted(BACKENDS), default="openai")
    p.add_argument("--base-url", help="openai: server URL ending in /v1, e.g. http://127.0.0.1:30000/v1")
    p.add_argument("--model", help="openai: served model name (default: the server's first); hf: model DIR")
    p.add_argument("--api-key", default="EMPTY", help="openai: API key sent to the server")
    p.add_argument("--method", help="KV method (hf); with openai: what a PASK server reports (checked if given), "
                   "else a label (report rows)")
    p.add_argument("--budget", type=float, help="KV budget in (0, 1] (hf); with openai: what a PASK server reports "
                   "(checked if given), else a label (default 1.0)")
    p.add_argument("--policy", help="policy file (hf); with openai a label")
    from sglang_pask.methods import SCHEDULES  # light: the registry (numpy only), no model code

    p.add_argument("--schedule", choices=SCHEDULES, help="when the method compresses (hf; default: the policy's "
                   "operating point for pask, else continuous); with openai a label")
    p.add_argument("--interval", type=int, help="hf: decode steps between budget checks under continuous "
                   "(default: the policy's operating point for pask, else 1)")
    from sglang_pask.policy.operating_point import SegmentRule  # light: the standard library

    SegmentRule.add_flags(p, help_prefix="hf: ")
    p.add_argument("--method-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a method option (repeatable), e.g. normalize=true, window=32; values parse as JSON scalars")
    p.add_argument("--limit", type=int, help="at most N entries per category (the first N)")
    p.add_argument("--workers", type=int, default=1, help="concurrent requests")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--tool-choice", choices=("auto", "required"), default="auto")
    p.add_argument("--enable-thinking", action="store_true", help="let Qwen3 chat templates think")
    p.add_argument("--request-timeout", type=float, default=600.0, help="openai: seconds per request")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True, help="run directory (resumable: finished entries are skipped)")


def _limit(entries: list, limit: int | None) -> list:
    if limit is None:
        return entries
    if limit < 1:
        raise ValueError("--limit must be >= 1")
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        if seen.get(e.category, 0) < limit:
            seen[e.category] = seen.get(e.category, 0) + 1
            out.append(e)
    return out


@command("eval", "score a backend on BFCL's AST categories or the synthetic set with BFCL's checker", _eval_args)
def _eval(args: argparse.Namespace) -> int:
    from sglang_pask.eval import make_backend
    from sglang_pask.eval.base import BackendError, BackendUnavailable
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import RunAborted, Settings, run_eval
    from sglang_pask.eval.records import parse_option, run_config
    from sglang_pask.eval.summary import markdown_table

    try:
        if args.budget is not None and not 0.0 < args.budget <= 1.0:
            raise ValueError("--budget must be in (0, 1]")
        args.method_options = dict(parse_option(o) for o in args.method_opt)
        entries = _limit(load_spec(args.data), args.limit)
        settings = Settings(args.max_tokens, args.temperature, args.tool_choice, args.enable_thinking)
        backend = make_backend(args.backend, args)
    except (ValueError, TypeError, BackendUnavailable, BackendError, RuntimeError) as e:
        print(f"pask eval: error: {e}", file=sys.stderr)
        return 2
    resolved = getattr(backend, "resolved", None)  # hf: the operating point it runs
    if resolved is not None:
        from sglang_pask.eval.hf_backend import FLAG_NAMES

        print(f"pask eval: operating point: {resolved.point.describe()}", file=sys.stderr)
        if line := resolved.override_line(FLAG_NAMES):
            print(f"pask eval: {line}", file=sys.stderr)
    config = run_config(args.data, method=args.method, budget=args.budget, schedule=args.schedule,
                        policy=args.policy, method_options=args.method_options, limit=args.limit,
                        workers=args.workers)
    try:
        summary = run_eval(entries, backend, args.out, settings, config, args.workers, not args.no_progress)
    except RunAborted as e:
        print(f"pask eval: aborted: {e}", file=sys.stderr)
        return 3
    except ValueError as e:
        print(f"pask eval: error: {e}", file=sys.stderr)
        return 2
    print(markdown_table(summary), end="")
    print(f"wrote {args.out}/results.jsonl, summary.json, summary.md")
    return 0


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="`pask eval --out` directories")
    p.add_argument("--out", default="pask_report", help="where report.md/.json and the PNG go")
    p.add_argument("--group-by", action="append", default=[], metavar="FIELD",
                   help="allow runs that differ in FIELD (model, data, tool_choice, max_tokens, temperature, "
                        "enable_thinking, backend) and key rows by it; repeatable")


@command("report", "merge eval runs into a methods x budgets x categories table and a PNG", _report_args)
def _report(args: argparse.Namespace) -> int:
    from sglang_pask.eval.report import write_report

    try:
        rep = write_report(args.runs, args.out, tuple(args.group_by))
    except ValueError as e:
        print(f"pask report: error: {e}", file=sys.stderr)
        return 2
    for w in rep["warnings"]:
        print(f"pask report: warning: {w}", file=sys.stderr)
    print(rep["markdown"], end="")
    print("wrote " + ", ".join(rep["files"]))
    return 0


def _retention_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--full", required=True, metavar="DIR", help="the Full KV run (`pask eval` / `pask sweep` folder)")
    p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                   help="a compressed run on the same entries (repeatable; rows in this order)")
    p.add_argument("--reference", default=None, metavar="LABEL",
                   help="a --run label every other row is paired with (retention difference, 95%% CI)")
    p.add_argument("--out", required=True, metavar="DIR", help="where retention.md and retention.json go")


def _retention_meta(args: argparse.Namespace) -> dict:
    """What wrote a retention folder: the command line (every input spelled out), commit, date."""
    import datetime
    import shlex

    from sglang_pask.eval.sweep import _git_commit

    parts = ["pask", "retention", "--full", args.full]
    for spec in args.run:
        parts += ["--run", spec]
    if args.reference:
        parts += ["--reference", args.reference]
    return {"command": shlex.join([*parts, "--out", args.out]), "git_commit": _git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@command("retention", "of the entries Full KV gets right, the share each compressed run keeps (paired)",
         _retention_args)
def _retention(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from sglang_pask.eval.retention import retention_markdown, retention_rows

    def load(folder: str) -> tuple[list[dict], dict]:
        d = Path(folder)
        try:
            recs = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines() if x.strip()]
            meta = json.loads((d / "run.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}: not a run folder (results.jsonl, run.json): {e}") from None
        return recs, meta

    try:
        full, fmeta = load(args.full)
        runs = {}
        for spec in args.run:
            label, eq, folder = spec.partition("=")
            if not eq or not label or label in runs:
                raise ValueError(f"--run {spec!r}: expected a new LABEL=DIR")
            runs[label], meta = load(folder)
            for k in ("data", "model", "max_tokens", "tool_choice", "temperature"):
                if meta.get(k) != fmeta.get(k):
                    raise ValueError(f"--run {label}: its {k} is {meta.get(k)!r}, the Full KV run's {fmeta.get(k)!r}")
        rows = retention_rows(full, runs, args.reference)
    except ValueError as e:
        print(f"pask retention: error: {e}", file=sys.stderr)
        return 2
    text = retention_markdown(rows, full)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "retention.md").write_text(text)
    (out / "retention.json").write_text(json.dumps({"full": args.full, "runs": dict(r.partition("=")[::2]
                                                                                    for r in args.run),
                                                    "rows": rows}, indent=1) + "\n")
    (out / "meta.json").write_text(json.dumps(_retention_meta(args), indent=1) + "\n")
    print(text, end="")
    print(f"wrote {out / 'retention.md'}, {out / 'retention.json'}, {out / 'meta.json'}")
    return 0


def _synth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=("train", "calib", "eval"), required=True)
    p.add_argument("--n", type=int, required=True, help="number of entries (round-robin over categories)")
    p.add_argument("--profile", default="bfcl_like", help="bfcl_like | tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="directory for <category>.jsonl + possible_answer/")


@command("synth", "write a seeded synthetic function-calling set in BFCL's format", _synth_args)
def _synth(args: argparse.Namespace) -> int:
    from sglang_pask.eval.synthetic import write_dataset

    try:
        files = write_dataset(args.out, args.split, args.n, args.profile, seed=args.seed)
    except ValueError as e:
        print(f"pask synth: error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _sweep_args(p: argparse.ArgumentParser) -> None:
    from sglang_pask.methods import SCHEDULES

    p.add_argument("--model", required=True, help="model DIR (the hf reference runner)")
    p.add_argument("--data", required=True, help="a --data spec, e.g. synthetic:eval:200:tiny")
    p.add_argument("--methods", type=_words, required=True,
                   help="comma list of NAME[:KEY=VALUE]..., e.g. full,streaming,h2o,h2o:normalize=true,snapkv")
    p.add_argument("--budgets", type=_floats, required=True, help="comma list, e.g. 0.5,0.33,0.2 (full: 1.0)")
    p.add_argument("--schedules", type=_words, default=["continuous"],
                   help=f"comma list of {', '.join(SCHEDULES)} (default: continuous)")
    p.add_argument("--policy", help="policy file for pask")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--tool-choice", choices=("auto", "required"), default="auto")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes, each loading the model once and running whole cells (more than one: "
                        "cell by cell, no shared prefill)")
    p.add_argument("--out", required=True, help="folder of run directories, one per cell (resumable)")
    p.add_argument("--results", help="where the report and meta.json go (default: OUT/report)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-share-prefill", action="store_true",
                   help="run cell by cell, each prefilling every entry again (default with --jobs 1: entry by "
                        "entry, one prompt forward per attention-statistics kind shared by the cells without a "
                        "segment rule; same records)")


def _sweep_command(args: argparse.Namespace) -> str:
    """The sweep's command line with every setting spelled out (what meta.json records)."""
    import shlex

    parts = ["pask", "sweep", "--model", args.model, "--data", args.data, "--methods", ",".join(args.methods),
             "--budgets", ",".join(f"{b:g}" for b in args.budgets), "--schedules", ",".join(args.schedules)]
    if args.policy:
        parts += ["--policy", args.policy]
    parts += ["--tool-choice", args.tool_choice, "--max-tokens", str(args.max_tokens), "--jobs", str(args.jobs),
              "--out", args.out]
    if args.results:
        parts += ["--results", args.results]
    if args.no_share_prefill:
        parts.append("--no-share-prefill")
    return shlex.join(parts)


@command("sweep", "run methods x schedules x budgets with the reference runner and write the report", _sweep_args)
def _sweep(args: argparse.Namespace) -> int:
    from sglang_pask.eval.sweep import run_sweep
    from sglang_pask.methods import SCHEDULES

    try:
        bad = [s for s in args.schedules if s not in SCHEDULES]
        if bad:
            raise ValueError(f"--schedules: unknown {', '.join(bad)} (choose from {', '.join(SCHEDULES)})")
        meta = run_sweep(model=args.model, data=args.data, methods=args.methods, budgets=args.budgets,
                         schedules=args.schedules, out=args.out, results=args.results, policy=args.policy,
                         settings={"max_tokens": args.max_tokens, "tool_choice": args.tool_choice},
                         jobs=args.jobs, progress=not args.no_progress, command=_sweep_command(args),
                         share_prefill=not args.no_share_prefill)
    except (ValueError, TypeError) as e:
        print(f"pask sweep: error: {e}", file=sys.stderr)
        return 2
    for w in meta["report"]["warnings"]:
        print(f"pask sweep: warning: {w}", file=sys.stderr)
    print(meta["report"]["markdown"], end="")
    print(f"wall time {meta['wall_s']:.0f} s; wrote " + ", ".join(meta["report"]["files"]) + " and meta.json")
    return 0
