"""Which positions a parity mismatch is made of: for the named entries, one server (radix cache
off) and the reference runner at the same method, budget and schedule; per compression and unit,
the positions only the server kept and only the runner kept (``(head, position)`` for a per-KV-head
method; bench/server_parity.py counts the mismatches; this names them).

    .venv/bin/python -m experiments.parity_kept_diff --method snapkv --budget 0.33 --schedule prefill \
        --ids synthetic_parallel_multiple_eval_3,synthetic_parallel_eval_14
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from sglang_pask.policy.shipped import shipped_policy

from bench.server_parity import openai_kwargs, reference_runner, server_side


def _entries(kept: list) -> set:
    """A unit's kept positions, or ``(head, position)`` pairs for a per-KV-head method's sets."""
    if kept and isinstance(kept[0], list):
        return {(h, p) for h, positions in enumerate(kept) for p in positions}
    return set(kept)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--method", default="pask")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--schedule", default="prefill")
    p.add_argument("--data", default="synthetic:eval:100:tiny")
    p.add_argument("--ids", required=True, help="comma-separated entry ids")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--interval", type=int, default=1)
    p.add_argument("--scorer", default=None, help="the learned scorer file of a method that reads one (kvzap)")
    a = p.parse_args(argv)
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.eval.parity import runner_trace

    wanted = set(a.ids.split(","))
    entries = [e for e in load_spec(a.data) if e.id in wanted]
    if len(entries) != len(wanted):
        raise SystemExit(f"parity_kept_diff: not in {a.data}: {sorted(wanted - {e.id for e in entries})}")
    settings = Settings(max_tokens=a.max_tokens, tool_choice="required")
    bodies = [runner_body(build_request(e, settings)[0]) for e in entries]
    with tempfile.TemporaryDirectory(prefix="pask-kept-diff-") as d:
        served, _cost = server_side(a.model, a.policy, a.budget, a.schedule, a.interval,
                                    [openai_kwargs(b) for b in bodies], a.max_tokens, a.method, d, "off", a.scorer)
    runner, units = reference_runner(a.model, a.policy, a.method, a.budget, a.schedule, a.interval, "off", a.scorer)
    for e, body in zip(entries, bodies):
        ref = runner_trace(runner, body, units, a.max_tokens)
        got = served[tuple(ref["prompt_ids"])]
        print(f"{e.id}: tokens {'identical' if got['output_ids'] == ref['output_ids'] else 'differ'}")
        for (step, seq_len, s_kept), (_, _, r_kept) in zip(got["compressions"], ref["compressions"]):
            for u in s_kept:
                s, r = _entries(s_kept[u]), _entries(r_kept[u])
                if s != r:
                    print(f"  step {step} (seq_len {seq_len}) unit {u}: kept {len(s)} / {len(r)}; "
                          f"server only {sorted(s - r)}, runner only {sorted(r - s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
