"""``pask eval``, ``pask report`` and ``pask synth``. Heavy imports stay inside the run functions."""

from __future__ import annotations

import argparse
import sys

from sglang_pask.cli import command
from sglang_pask.eval import BACKENDS


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", required=True, help="bfcl:all | bfcl:CAT[,CAT...] | synthetic:SPLIT:N[:PROFILE] | file:DIR"
    )
    p.add_argument("--backend", choices=sorted(BACKENDS), default="openai")
    p.add_argument("--base-url", help="openai: server URL ending in /v1, e.g. http://127.0.0.1:30000/v1")
    p.add_argument("--model", help="openai: served model name (default: the server's first); hf: model DIR")
    p.add_argument("--api-key", default="EMPTY", help="openai: API key sent to the server")
    p.add_argument("--method", help="KV method (hf); with openai a label for the server's setup (report rows)")
    p.add_argument("--budget", type=float, help="KV budget in (0, 1] (hf); with openai a label (default 1.0)")
    p.add_argument("--policy", help="policy file (hf); with openai a label")
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
    from sglang_pask.eval.summary import markdown_table

    try:
        if args.budget is not None and not 0.0 < args.budget <= 1.0:
            raise ValueError("--budget must be in (0, 1]")
        entries = _limit(load_spec(args.data), args.limit)
        settings = Settings(args.max_tokens, args.temperature, args.tool_choice, args.enable_thinking)
        backend = make_backend(args.backend, args)
    except (ValueError, BackendUnavailable, BackendError, RuntimeError) as e:
        print(f"pask eval: error: {e}", file=sys.stderr)
        return 2
    config = {
        "data": args.data,
        "limit": args.limit,
        "workers": args.workers,
        "method": args.method,
        "budget": args.budget,
        "policy": args.policy,
    }
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


@command("report", "merge eval runs into a methods x budgets x categories table and a PNG", _report_args)
def _report(args: argparse.Namespace) -> int:
    from sglang_pask.eval.report import write_report

    try:
        rep = write_report(args.runs, args.out)
    except ValueError as e:
        print(f"pask report: error: {e}", file=sys.stderr)
        return 2
    for w in rep["warnings"]:
        print(f"pask report: warning: {w}", file=sys.stderr)
    print(rep["markdown"], end="")
    print("wrote " + ", ".join(rep["files"]))
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
