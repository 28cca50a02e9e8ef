"""``pask policy prior``: write an uncalibrated structure-prior policy; ``pask policy check``.
(``pask policy ablate`` needs calibrate, so it registers from ``calibrate/commands.py``.)"""

from __future__ import annotations

import argparse

from sglang_pask.cli import command, group

group("policy", "write (prior) or validate (check) a PASK policy file")


def _prior_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory (its config.json binds the policy)")
    p.add_argument("--groups", type=int, required=True, help="number of layer groups (consecutive, even)")
    p.add_argument("--budget", type=float, required=True, help="default budget b in (0, 1]")
    p.add_argument("--out", required=True, help="policy file to write")
    p.add_argument("--sinks", type=int, default=4, help="attention-sink tokens always kept (default 4)")
    p.add_argument("--recent-window", type=int, default=16, help="newest tokens always kept (default 16)")
    p.add_argument("--name", default=None, help="a name recorded in the file")


def _check_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--model", default=None, help="model directory to check the binding against")


@command("policy check", "validate a policy file (and its binding to --model)", _check_setup)
def check(args: argparse.Namespace) -> int:
    import sys

    from sglang_pask.policy import PolicyError, load_policy

    try:
        p = load_policy(args.file, model_dir=args.model)
    except PolicyError as e:
        print(f"pask policy check: {e}", file=sys.stderr)
        return 1
    kind = "calibrated" if p.calibration is not None else "uncalibrated (prior)"
    print(f"ok: {args.file}: {kind}, {p.num_groups} groups, budget {p.budget:g}, {p.model.shape()}")
    return 0


@command("policy prior", "write a structure-prior policy (calibration: null)", _prior_setup)
def prior(args: argparse.Namespace) -> int:
    import sys

    from pydantic import ValidationError

    from sglang_pask.policy import save_policy
    from sglang_pask.policy.binding import BindingError, ModelBinding
    from sglang_pask.policy.prior import prior_policy
    from sglang_pask.policy.schema import describe

    try:
        binding = ModelBinding.from_model(args.model)
        policy = prior_policy(binding, args.groups, args.budget, sinks=args.sinks,
                              recent_window=args.recent_window, name=args.name)
    except ValidationError as e:
        print(f"pask policy prior: {describe(e)}", file=sys.stderr)
        return 2
    except (BindingError, ValueError) as e:
        print(f"pask policy prior: {e}", file=sys.stderr)
        return 2
    save_policy(policy, args.out)
    print(f"wrote {args.out}: prior policy, {policy.num_groups} groups {policy.groups}, "
          f"budget {policy.budget:g}, calibration null")
    return 0
