"""Each compiled operator's bad-input errors, one subprocess per case so that a crash shows as
its return code (-11: segfault) instead of ending the check: the operators' refusals must raise
a RuntimeError naming the problem on every device (``bench/gpu_check.sh`` runs it on the GPU).

    python3 bench/ops_throw_check.py    # prints one line per case: name, return code, last lines
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRE = ("import torch; from sglang_pask import ops; "
       "lib = ops.compiled(); assert lib is not None, ops.implementation(); ")
Z = "torch.zeros(1, 5, dtype=torch.long)"
CASES = {  # name: (code, expected return code: 0 runs, 1 raises)
    "schema": ("print(lib.take_slots.default._schema)", 0),
    "top_n_mask bad shape": ("lib.top_n_mask(torch.zeros(2, 3, dtype=torch.bool), "
                             "torch.zeros(2, 4, dtype=torch.float64), "
                             "torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))", 1),
    "take_slots ok (cpu)": ("m = torch.arange(1, 6).reshape(1, 5); "
                            "print(lib.take_slots(m, 0, torch.tensor([1, 2])), m)", 0),
    "take_slots bad unit (cpu)": (f"lib.take_slots({Z}, 1, torch.tensor([0]))", 1),
    "take_slots bad id (cpu)": (f"lib.take_slots({Z}, 0, torch.tensor([9]))", 1),
    "take_slots bad id (cpu, inference_mode)":
        (f"\nwith torch.inference_mode(): lib.take_slots({Z}, 0, torch.tensor([9]))", 1),
    "take_slots bad id (cpu, redispatch to CPU)":
        ("torch.ops.sglang_pask.take_slots.default.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), "
         f"{Z}, 0, torch.tensor([9]))", 1),
    "decode_attention bad count (cpu)": ("lib.decode_attention(torch.zeros(1, 2, 4), torch.zeros(3, 1, 4), "
                                         "torch.zeros(3, 1, 4), torch.ones(1, 2, dtype=torch.long), "
                                         "torch.tensor([5]), 1.0)", 1),
    "take_slots bad id (cuda)": ("lib.take_slots(torch.zeros(1, 5, dtype=torch.long, device='cuda'), 0, "
                                 "torch.tensor([9], device='cuda'))", 1),
    "take_slots ok (cuda)": ("m = torch.arange(1, 6, device='cuda').reshape(1, 5); "
                             "print(lib.take_slots(m, 0, torch.tensor([1, 2], device='cuda')), m)", 0),
}


def main() -> int:
    import torch

    bad = 0
    for name, (code, want) in CASES.items():
        if "cuda" in name and not torch.cuda.is_available():
            print(f"== {name}: skipped (no CUDA)")
            continue
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", PRE + code],
                           capture_output=True, text=True, cwd=ROOT)
        tail = (r.stdout + r.stderr).strip().splitlines()
        ok = r.returncode == want
        bad += not ok
        verdict = "ok" if ok else f"WANTED {want}"
        print(f"== {name}: rc={r.returncode} ({verdict}): " + " | ".join(tail[-1:])[:300], flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
