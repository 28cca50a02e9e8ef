"""Which shipped policy a model runs: one rule, in one place.

``policies/`` (at the repository root) holds what a user runs: for each model, one calibrated file
per budget, ``<model>.b<budget>.json``, and the uncalibrated structure prior, ``<model>.prior.json``
(``<model>`` is the model folder's name). The default budget is :data:`DEFAULT_BUDGET`: a model's
default policy is its ``.b0.33.json`` file. Variants, calibration records and plots live in the
notebook (``experiments/``), never here. ``make bench`` and the bench scripts ask this module
(``python -m sglang_pask.policy.shipped MODEL [BUDGET]`` prints the path).
"""

from __future__ import annotations

import os
import sys

#: the folder of the shipped policies, relative to the repository root
FOLDER = "policies"
#: the budget a model's default policy is calibrated for
DEFAULT_BUDGET = 0.33


def shipped_policy(model: str, budget: float | None = None, folder: str = FOLDER) -> str:
    """``policies/<model folder name>.b<budget>.json`` (``budget`` None: :data:`DEFAULT_BUDGET`);
    the path is returned whether or not the file exists (callers load it and say so)."""
    name = os.path.basename(os.path.normpath(model))
    b = DEFAULT_BUDGET if budget is None else float(budget)
    return os.path.join(folder, f"{name}.b{b:g}.json")


def prior_policy_path(model: str, folder: str = FOLDER) -> str:
    """``policies/<model folder name>.prior.json``: the model's uncalibrated structure prior."""
    return os.path.join(folder, f"{os.path.basename(os.path.normpath(model))}.prior.json")


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m sglang_pask.policy.shipped MODEL_DIR [BUDGET]", file=sys.stderr)
        return 2
    print(shipped_policy(argv[0], float(argv[1]) if len(argv) == 2 else None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
