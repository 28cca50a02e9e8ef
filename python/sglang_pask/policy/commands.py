"""``pask policy prior``: write an uncalibrated structure-prior policy; ``pask policy check``;
``pask policy ablate``: write an ablation of a policy (:mod:`sglang_pask.calibrate.ablation`)."""

from __future__ import annotations

import argparse

from sglang_pask.cli import command


def _setup(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="policy_command", required=True)
    prior = sub.add_parser("prior", help="write a structure-prior policy (calibration: null)")
    prior.add_argument("--model", required=True, help="model directory (its config.json binds the policy)")
    prior.add_argument("--groups", type=int, required=True, help="number of layer groups (consecutive, even)")
    prior.add_argument("--budget", type=float, required=True, help="default budget b in (0, 1]")
    prior.add_argument("--out", required=True, help="policy file to write")
    prior.add_argument("--sinks", type=int, default=4, help="attention-sink tokens always kept (default 4)")
    prior.add_argument("--recent-window", type=int, default=16, help="newest tokens always kept (default 16)")
    prior.add_argument("--name", default=None, help="a name recorded in the file")
    check = sub.add_parser("check", help="validate a policy file (and its binding to --model)")
    check.add_argument("file")
    check.add_argument("--model", default=None, help="model directory to check the binding against")
    from sglang_pask.calibrate.ablation import ABLATIONS

    ablate = sub.add_parser("ablate", help="write a policy with one part taken out (floors or residual steering)")
    ablate.add_argument("file", help="the policy to ablate")
    ablate.add_argument("--variant", required=True, choices=ABLATIONS)
    ablate.add_argument("--out", required=True, help="policy file to write")


@command("policy", "write (prior) or validate (check) a PASK policy file", _setup)
def run(args: argparse.Namespace) -> int:
    import sys

    from sglang_pask.policy import PolicyError, load_policy, save_policy

    if args.policy_command == "ablate":
        from sglang_pask.calibrate.ablation import ablate

        try:
            p = ablate(load_policy(args.file), args.variant)
        except PolicyError as e:
            print(f"pask policy ablate: {e}", file=sys.stderr)
            return 1
        save_policy(p, args.out)
        print(f"wrote {args.out}: {p.name}")
        return 0
    if args.policy_command == "check":
        try:
            p = load_policy(args.file, model_dir=args.model)
        except PolicyError as e:
            print(f"pask policy check: {e}", file=sys.stderr)
            return 1
        kind = "calibrated" if p.calibration is not None else "uncalibrated (prior)"
        print(f"ok: {args.file}: {kind}, {p.num_groups} groups, budget {p.budget:g}, {p.model.shape()}")
        return 0

    from pydantic import ValidationError

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
