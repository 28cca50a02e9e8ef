"""Why PASK trailed KVzip at b = 0.2, lever by lever, on calib entries (the decision behind
``pask calibrate --search-start`` for the ranked calibration; the eval split is never used).

Each variant is the sturdier calibration's attention-informed 0.2 policy
(``experiments/policies/pask-tiny-fc.sturdy-attn.b0.2.json``: two 2-layer groups, a recent window of 27
tokens, floors on the names, values and query text) with some of its fields replaced: the
residual ranked by KVzip's scores per KV head (residual ``stat: kvzip``, ``per_head``), the
recent window, the floors, the blend, the residual split (``share`` or ``scores``) and the layer
groups (one per layer: the class order and floors of each 2-layer group repeated for its two
layers, equal shares). KVzip itself runs beside them. Every variant is one ``pask sweep`` cell
(prefill schedule, tool_choice required, 128 tokens); one ``pask report`` holds them all.

    .venv/bin/python -m experiments.ranked_probe --out experiments/results/pask-tiny-fc-calib-ranked-probe-n100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from sglang_pask.policy.residual import convert_document

ROOT = Path(__file__).resolve().parents[1]
BASE = "experiments/policies/pask-tiny-fc.sturdy-attn.b0.2.json"
PINS = ("TOOL_NAME", "PARAM_NAME", "ENUM_VALUE", "QUERY_VALUE", "QUERY_TEXT")
KVZIP_HEADS = {"attention_stat": "kvzip", "head_split": True}
#: name -> (fields replaced, floors (None: the base's), one group per layer)
VARIANTS = {
    "base+kvzip-heads-blend1": ({**KVZIP_HEADS, "attention_blend": 1.0}, None, False),
    "2groups-share-nofloors": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0}, (), False),
    "2groups-ranked-nofloors": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0,
                                 "residual_split": "scores"}, (), False),
    "4groups-share-nofloors": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0}, (), True),
    "4groups-ranked-nofloors": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0,
                                 "residual_split": "scores"}, (), True),
    "4groups-ranked-pins": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0,
                             "residual_split": "scores"}, PINS, True),
    "4groups-ranked-queryvalue": ({**KVZIP_HEADS, "attention_blend": 1.0, "recent_window": 0,
                                   "residual_split": "scores"}, ("QUERY_VALUE",), True),
    "4groups-ranked-blend0.75": ({**KVZIP_HEADS, "attention_blend": 0.75, "recent_window": 0,
                                  "residual_split": "scores"}, (), True),
    "4groups-ranked-blend0.5": ({**KVZIP_HEADS, "attention_blend": 0.5, "recent_window": 0,
                                 "residual_split": "scores"}, (), True),
}


def variant(base: dict, name: str) -> dict:
    fields, floors, per_layer = VARIANTS[name]
    doc = json.loads(json.dumps(base))
    doc.update(fields, name=f"probe-{name}", calibration=None)
    doc = convert_document(doc)  # the old residual fields above, as the policy's residual block
    if floors is not None:
        doc["floor"] = [{c: (1.0 if c in floors else 0.0) for c in row} for row in doc["floor"]]
    if per_layer:  # each 2-layer group's order and floors for both of its layers
        doc["priority"] = [p for p in doc["priority"] for _ in range(2)]
        doc["floor"] = [f for f in doc["floor"] for _ in range(2)]
        doc["groups"] = [[layer] for layer in range(doc["model"]["num_layers"])]
        n = len(doc["groups"])
        doc["residual_share"] = [round(1.0 / n, 6)] * (n - 1) + [round(1.0 - (n - 1) * round(1.0 / n, 6), 6)]
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="synthetic:calib:100:tiny")
    ap.add_argument("--budget", default="0.2")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--runs", default="runs/ranked-probe", help="sweep folders (resumable)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if ":calib:" not in args.data:
        ap.error("--data must be a calib split: this probe chooses where the calibration starts")
    base = json.loads((ROOT / BASE).read_text())
    runs, out = ROOT / args.runs, ROOT / args.out
    (runs / "policies").mkdir(parents=True, exist_ok=True)
    common = ["--model", "models/pask-tiny-fc", "--data", args.data, "--budgets", args.budget, "--schedules",
              "prefill", "--tool-choice", "required", "--max-tokens", "128", "--jobs", str(args.jobs),
              "--no-progress"]
    t0 = time.perf_counter()
    cells = []

    def sweep(tag: str, *extra: str) -> None:
        subprocess.run([str(ROOT / ".venv/bin/pask"), "sweep", *common, *extra, "--out", str(runs / tag)],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        cells.extend(str(d) for d in sorted((runs / tag).iterdir()) if (d / "summary.json").exists())

    sweep("kvzip", "--methods", "kvzip")
    for name in VARIANTS:
        path = runs / "policies" / f"{name}.json"
        path.write_text(json.dumps(variant(base, name), indent=1))
        sweep(name, "--methods", "pask", "--policy", str(path))
    subprocess.run([str(ROOT / ".venv/bin/pask"), "report", *cells, "--out", str(out)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = {"command": "python -m experiments.ranked_probe " + " ".join(sys.argv[1:]), "code": commit,
            "base": BASE,
            "variants": {n: {"fields": f, "floors": fl, "one_group_per_layer": pl}
                         for n, (f, fl, pl) in VARIANTS.items()},
            "wall_s": round(wall, 1)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
