"""What each method keeps at prefill end, by structural class and by layer: where calibrated PASK
and the attention-based methods (KVzip, Expected Attention, SnapKV per head) spend the budget.

For the first ``--n`` entries of ``--data`` (a calib split: this diagnoses, it chooses nothing),
each method runs on the reference runner under ``prefill`` at ``--budget`` and its prefill-end
compression is read: per structural class, the share of that class's prompt token-head slots kept
(over all layers and KV heads), and per layer, the share of the budget it got (accuracy: the
sweeps' tables).

    .venv/bin/python -m experiments.kept_by_class --out experiments/results/pask-tiny-fc-kept-by-class-calib
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from sglang_pask.policy.shipped import shipped_policy


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--data", default="synthetic:calib:60:tiny")
    p.add_argument("--n", type=int, default=60)
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--methods", default="pask,kvzip,expected_attention,snapkv:per_head=true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.hf import Runner
    from sglang_pask.structure.classes import StructClass

    entries = load_spec(a.data)[: a.n]
    settings = Settings(max_tokens=128, tool_choice="required")
    t0 = time.time()
    rows = {}
    for spec in a.methods.split(","):
        name, *opts = spec.split(":")
        options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in opts)}
        runner = Runner(a.model, method=name, budget=a.budget, policy=a.policy if name == "pask" else None,
                        method_options={"schedule": "prefill", **options})
        kept_c = np.zeros(len(StructClass))
        held_c = np.zeros(len(StructClass))
        layer_share = np.zeros(runner.num_layers)
        for e in entries:
            req, _ = build_request(e, settings)
            res = runner.generate(runner_body(req), 1)  # the prefill-end compression is all we read
            c = res.compressions[0]
            P = c.seq_len
            cls = np.asarray(res.classes[:P])
            H = runner.model.config.num_key_value_heads
            for li, k in enumerate(c.kept):
                per_head = c.head_mask[li].sum(0) if c.head_mask is not None else np.full(len(k), H)
                np.add.at(kept_c, cls[k], per_head)
                np.add.at(held_c, cls, H)
                layer_share[li] += per_head.sum()
        rows[spec] = {"kept_share_by_class": {StructClass(i).name: round(float(kept_c[i] / held_c[i]), 4)
                                              for i in range(len(StructClass)) if held_c[i]},
                      "budget_share_by_layer": [round(float(x), 4) for x in layer_share / layer_share.sum()]}
        print(spec, json.dumps(rows[spec]), flush=True)
    classes = [c for c in rows[next(iter(rows))]["kept_share_by_class"]]
    lines = ["# What each method keeps at prefill end (written by experiments/kept_by_class.py)", "",
             f"Command: `python -m experiments.kept_by_class {' '.join(sys.argv[1:])}` "
             f"({time.time() - t0:.0f} s). `{a.model}`, {len(entries)} entries "
             f"of `{a.data}`, b = {a.budget:g}, prefill schedule, reference runner. Share of each class's prompt "
             "token-head slots kept (all layers and KV heads).", "",
             "| class | " + " | ".join(rows) + " |", "|---|" + "---:|" * len(rows)]
    for c in classes:
        lines.append(f"| {c} | " + " | ".join(f"{100 * r['kept_share_by_class'].get(c, 0):.1f}"
                                              for r in rows.values()) + " |")
    lines += ["", "Share of the kept token-head slots per layer:", "",
              "| layer | " + " | ".join(rows) + " |", "|---|" + "---:|" * len(rows)]
    for li in range(len(next(iter(rows.values()))["budget_share_by_layer"])):
        lines.append(f"| {li} | " + " | ".join(f"{100 * r['budget_share_by_layer'][li]:.1f}" for r in rows.values())
                     + " |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
