"""``pask policy prior``: write an uncalibrated structure-prior policy; ``pask policy check``;
``pask policy upgrade``: re-issue a policy in the current format with the operating point it was
calibrated under.
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
    point = p.point.describe() if p.point is not None else f"none ({p.format}: the engines' defaults)"
    scorer = (f", learned scorer {p.residual.scorer} (sha256 {p.residual.scorer_sha256[:12]}..., verified)"
              if p.scorer_path else "")
    print(f"ok: {args.file}: {kind}, {p.num_groups} groups, budget {p.budget:g}, {p.model.shape()}, "
          f"operating point: {point}{scorer}")
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


def _upgrade_setup(p: argparse.ArgumentParser) -> None:
    from sglang_pask.policy.operating_point import SCHEDULES, SegmentRule  # light: the standard library

    p.add_argument("file", help="a policy file (format 1 or 2)")
    p.add_argument("--out", default=None, help="where to write (default: FILE, rewritten in place)")
    p.add_argument("--schedule", choices=SCHEDULES, required=True,
                   help="the schedule the policy was calibrated under (its calibration record says)")
    p.add_argument("--interval", type=int, default=1, help="decode steps between budget checks (default 1)")
    SegmentRule.add_flags(p, help_prefix="the segment rule it was calibrated under: ")


@command("policy upgrade", "re-issue a policy (format 2) recording the operating point it was calibrated under",
         _upgrade_setup)
def upgrade(args: argparse.Namespace) -> int:
    import sys

    from sglang_pask.policy import PolicyError, load_policy, save_policy
    from sglang_pask.policy.envelope import FORMAT
    from sglang_pask.policy.operating_point import OperatingPoint, OperatingPointError, SegmentRule, flag_names

    names = flag_names()
    try:
        policy = load_policy(args.file)
        point = OperatingPoint(args.schedule, args.interval, SegmentRule(**SegmentRule.overrides(args)))
    except OperatingPointError as e:
        print(f"pask policy upgrade: {e.named(names)}", file=sys.stderr)
        return 2
    except PolicyError as e:
        print(f"pask policy upgrade: {e}", file=sys.stderr)
        return 1
    doc = policy.model_dump(mode="json")
    doc.update(format=FORMAT, operating_point=point.record())
    out = args.out or args.file
    save_policy(type(policy).model_validate(doc), out)
    print(f"wrote {out}: {FORMAT}, operating point: {point.describe()}")
    return 0
