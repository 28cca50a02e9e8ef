"""Why a method loses the calls it loses: for its right -> wrong flips against Full KV, what the
call copies from the prompt (the tool name, the parameter names, the argument values) and how much
of it the method kept.

For each flipped entry (right under ``--full``, wrong under ``--run``) and, as a control, for the
entries the method kept right (the first ``--control`` of them), the method's prefill-end
compression is recomputed on the reference runner (the compression a ``prefill`` schedule makes,
the one whose decode the run scored). The gold call's strings (BFCL's ground truth: each function
name, parameter name and string value of at least 2 characters) are located in the rendered
prompt; a prompt token is *copied* when its text overlaps such an occurrence. Per kind of string,
the share of the copied tokens' (layer, KV head) slots the method kept; per structural class of
those tokens, the same. The run's own error type (BFCL's checker) is listed per flip.

    .venv/bin/python bench/flip_causes.py --model models/qwen2.5-coder-0.5b-instruct \\
        --data SPEC --full runs/.../full --run runs/.../pask-prefill-0.2 --method pask \\
        --policy policies/qwen2.5-coder-0.5b-instruct.b0.2.json --budget 0.2 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

KINDS = ("tool name", "parameter name", "value")


def gold_strings(ground_truth) -> dict[str, set[str]]:
    """The strings a correct call copies, by kind (BFCL's possible answers: any allowed string)."""
    out: dict[str, set[str]] = {k: set() for k in KINDS}
    for call in ground_truth:
        for func, params in call.items():
            out["tool name"].add(func.split(".")[-1])
            for name, allowed in params.items():
                out["parameter name"].add(name)
                for v in allowed if isinstance(allowed, list) else [allowed]:
                    if isinstance(v, str) and len(v.strip()) >= 2:
                        out["value"].add(v.strip())
    return {k: {s for s in v if len(s) >= 2} for k, v in out.items()}


def copied_tokens(tokenizer, prompt_ids, strings: dict[str, set[str]]) -> dict[str, np.ndarray]:
    """Per kind, the prompt positions whose text overlaps an occurrence of one of its strings."""
    pieces = [tokenizer.decode([t]) for t in prompt_ids]
    starts = np.cumsum([0] + [len(p) for p in pieces])
    text = "".join(pieces)
    out = {}
    for kind, ss in strings.items():
        hit = np.zeros(len(pieces), dtype=bool)
        for s in ss:
            i = text.find(s)
            while i >= 0:
                lo = np.searchsorted(starts, i, side="right") - 1
                hi = np.searchsorted(starts, i + len(s), side="left")
                hit[lo:hi] = True
                i = text.find(s, i + 1)
        out[kind] = np.flatnonzero(hit)
    return out


def kept_share(comp, positions: np.ndarray, heads: int) -> float | None:
    """Share of the (layer, KV head) slots of ``positions`` the compression kept."""
    if not len(positions):
        return None
    kept = total = 0
    for li, k in enumerate(comp.kept):
        per = comp.head_mask[li].sum(0) if comp.head_mask is not None else np.full(len(k), heads)
        where = np.isin(k, positions)
        kept += int(per[where].sum())
        total += len(positions) * heads
    return kept / total


def load(folder: str) -> dict:
    return {(r["category"], r["id"]): r for r in
            (json.loads(x) for x in (Path(folder) / "results.jsonl").read_text().splitlines() if x.strip())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="the runs' data spec")
    p.add_argument("--full", required=True, help="the Full KV run folder")
    p.add_argument("--run", required=True, help="the method's run folder")
    p.add_argument("--method", required=True, help="the method (registry name[:opt=v...]) the run used")
    p.add_argument("--policy", default=None)
    p.add_argument("--budget", type=float, required=True)
    p.add_argument("--control", type=int, default=30, help="retained entries measured as the control")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.hf import Runner
    from sglang_pask.methods.options import parse_method_spec
    from sglang_pask.structure.classes import StructClass

    t0 = time.time()
    full, run = load(a.full), load(a.run)
    entries = {(e.category, e.id): e for e in load_spec(a.data)}
    both = [k for k in full if k in run]  # a run still under way: the entries it has scored
    flips = [k for k in both if full[k]["valid"] and not run[k]["valid"]]
    kept_right = [k for k in both if full[k]["valid"] and run[k]["valid"]][: a.control]
    name, options = parse_method_spec(a.method)
    runner = Runner(a.model, method=name, budget=a.budget, policy=a.policy if name == "pask" else None,
                    method_options={"schedule": "prefill", **options})
    heads = runner.model.config.num_key_value_heads
    settings = Settings(max_tokens=a.max_tokens, tool_choice="required")
    rows = {"flip": [], "control": []}
    for group, keys in (("flip", flips), ("control", kept_right)):
        for k in keys:
            e = entries[k]
            res = runner.generate(runner_body(build_request(e, settings)[0]), 1)
            comp = res.compressions[0]
            prompt = res.prompt_ids[: comp.seq_len]
            where = copied_tokens(runner.tokenizer, prompt, gold_strings(e.ground_truth))
            classes = np.asarray(res.classes[: comp.seq_len])
            by_class = {}
            for pos in where.values():
                for c in np.unique(classes[pos]):
                    at = pos[classes[pos] == c]
                    by_class.setdefault(StructClass(int(c)).name, []).append(at)
            rows[group].append({
                "category": k[0], "id": k[1], "error_type": run[k].get("error_type"),
                "kept_by_kind": {kind: kept_share(comp, pos, heads) for kind, pos in where.items()},
                "kept_by_class": {c: kept_share(comp, np.unique(np.concatenate(v)), heads)
                                  for c, v in by_class.items()}})
            print(group, k, json.dumps(rows[group][-1]["kept_by_kind"]), flush=True)

    def mean(group, field, key):
        xs = [r[field][key] for r in rows[group] if r[field].get(key) is not None]
        return (f"{100 * np.mean(xs):.1f} (n={len(xs)})" if xs else "-")

    lines = [f"# Why `{a.method}` at b = {a.budget:g} loses calls Full KV gets right (written by bench/flip_causes.py)",
             "", f"Command: `python {' '.join(sys.argv)}` ({time.time() - t0:.0f} s). Right -> wrong flips: "
             f"{len(flips)} of the {len(both)} entries both runs scored ({len(full)} in the Full KV run); control: "
             f"{len(kept_right)} entries it kept right. Share (%) of the (layer, KV head) "
             "slots kept at prefill end, of the prompt tokens the gold call copies:", "",
             "| what the call copies | flips | control (kept right) |", "|---|---:|---:|"]
    lines += [f"| {kind} | {mean('flip', 'kept_by_kind', kind)} | {mean('control', 'kept_by_kind', kind)} |"
              for kind in KINDS]
    classes = sorted({c for g in rows.values() for r in g for c in r["kept_by_class"]})
    lines += ["", "The same by the copied tokens' structural class:", "",
              "| class | flips | control |", "|---|---:|---:|"]
    lines += [f"| {c} | {mean('flip', 'kept_by_class', c)} | {mean('control', 'kept_by_class', c)} |" for c in classes]
    errors: dict[str, int] = {}
    for r in rows["flip"]:
        errors[r["error_type"] or "?"] = errors.get(r["error_type"] or "?", 0) + 1
    lines += ["", "The flips' errors (BFCL's checker):", "", "| error type | flips |", "|---|---:|"]
    lines += [f"| {t} | {n} |" for t, n in sorted(errors.items(), key=lambda t: -t[1])]
    os.makedirs(a.out, exist_ok=True)
    Path(a.out, "flip_causes.md").write_text("\n".join(lines) + "\n")
    Path(a.out, "flip_causes.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
