"""``pask calibrate``: measure S and D on a calibration split and compile them into policies;
``pask policy ablate``: write an ablation of a policy (:mod:`sglang_pask.calibrate.ablation`; a
subcommand of ``pask policy``, registered here because it needs calibrate, which sits above policy)."""

from __future__ import annotations

import argparse

from sglang_pask.cli import command

#: search.OBJECTIVES, spelled here so the CLI parser does not import the scoring stack (a test
#: checks the two agree); the teacher-forced ones with the name the summary line gives their value
OBJECTIVES = ("accuracy", "nll", "kl")
_FORCED_NAMES = {"nll": "gold NLL", "kl": "KL from Full KV"}


def _floats(text: str) -> tuple:
    return tuple(float(x) for x in text.replace(" ", ",").split(",") if x)


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--data", required=True, help="calibration data: synthetic:calib:N[:PROFILE] or bfcl:CATS:calib=K "
                   "(BFCL outside the eval=K subset)")
    p.add_argument("--groups", type=int, required=True, help="number of layer groups (consecutive, even)")
    p.add_argument("--budgets", type=_floats, default=(0.5, 0.33, 0.2), help="comma list (default 0.5,0.33,0.2)")
    p.add_argument("--schedule", default="prefill", choices=("prefill", "continuous"),
                   help="schedule the family search scores under (default prefill)")
    p.add_argument("--seed", type=int, default=0, help="entry permutation and bootstrap seed (default 0)")
    p.add_argument("--fit-n", type=int, default=60, help="entries the family search scores (default 60)")
    p.add_argument("--probe-n", type=int, default=40, help="of those, entries S and D use (default 40)")
    p.add_argument("--max-tokens", type=int, default=128, help="generation limit (default 128)")
    p.add_argument("--tool-choice", default="required", choices=("auto", "required"))
    p.add_argument("--main-budget", type=float, default=0.33, help="budget whose policy --out holds")
    p.add_argument("--interval", type=int, default=1,
                   help="decode steps between budget checks under --schedule continuous (default 1)")
    from sglang_pask.policy.operating_point import SegmentRule  # light: the standard library

    # the rule the search scores under, recorded in every policy written (default: none)
    SegmentRule.add_flags(p, help_prefix="score the search under this segment rule, and record it: ")
    p.add_argument("--check-n", type=int, default=None,
                   help="held-out calib entries the chosen policies are checked on (default: all the rest)")
    p.add_argument("--prefill-memo-mb", type=int, default=2048,
                   help="MiB of prompt forwards reused across probes and search members (0: none; "
                        "the results are the same, only the time differs; default 2048)")
    p.add_argument("--search-passes", type=int, default=2,
                   help="passes of the coordinate search over the family's axes (default 2; 1 scores at "
                        "most 1 + the sum of each axis's other values members per budget)")
    p.add_argument("--search-objective", default="accuracy", choices=OBJECTIVES,
                   help="what the family search maximises per member: accuracy (generation + BFCL's "
                        "checker), nll (minus the gold call's teacher-forced NLL: no generation) or kl "
                        "(minus the mean KL from Full KV's next-token distributions along the gold call: "
                        "no generation, no offsetting between positions); the held-out check generates "
                        "either way (default accuracy)")
    p.add_argument("--attention-blend", action="store_true",
                   help="search the attention-informed family too: the residual's order inside a group "
                        "blended with attention votes (the policy's residual block, its blend tried at 0, "
                        "0.25, 0.5, 0.75, 1, after the other axes). Such policies run on the reference "
                        "runner and on the server's torch backend (the server records the window's attention)")
    p.add_argument("--search-start", default="", metavar="FIELD=V[,FIELD=V...]",
                   help="where the family search (and each k-fold search) starts: the default start "
                        "(window_frac=0.25, top_k=0, alpha=0, sinks=4, tilt=0, rank=total) with these fields "
                        "set, e.g. rank=joint,window_frac=0,blend=0.5,scorer=kvzip/heads,split=scores "
                        "(the attention-informed region, with --attention-blend)")
    p.add_argument("--scorer", default="", metavar="FILE",
                   help="with --attention-blend: the learned scorer (`pask fit-scorer`, fitted for --model on "
                        "train prompts) the residual reads in place of the attention statistics -- the family's "
                        "scorer axis becomes learned / learned per KV head, so every policy it writes needs no "
                        "reconstruction forward; each such policy pins the file by name and sha256 and gets a "
                        "copy beside it")
    p.add_argument("--equal-pools", action="store_true",
                   help="with --attention-blend: only members the server's per-group KV pools hold at the "
                        "budget -- b of every layer group (split share) and one set of positions per group "
                        "(a scorer not per KV head); per-head sets and a split across groups serve fewer "
                        "requests in the same KV bytes")
    p.add_argument("--baseline", default="snapkv", metavar="METHOD[:OPT=V...]",
                   help="the method every search member and the held-out check are paired with, at the same "
                        "schedule and budget: pass the strongest one on calib (default snapkv, per KV head; "
                        "options as in `pask sweep --methods`, e.g. snapkv:per_head=false, which the segment "
                        "rule needs)")
    p.add_argument("--folds", type=int, default=0, metavar="K",
                   help="K > 1: the K-fold estimate of the search on the fit entries (the search re-run on "
                        "K-1 folds, its choice scored on the held one), reported next to the chosen member's "
                        "fit score (default 0: none)")
    p.add_argument("--sensitivity-signal", default="both", choices=("both", "nll"),
                   help="what each sensitivity probe measures: both (generation + BFCL's checker, and the "
                        "teacher-forced gold NLL) or nll (the gold NLL only: one forward per probe, no "
                        "generation; default both)")
    p.add_argument("--reuse-stages", default=None, metavar="RECORD",
                   help="a NAME.calibration.json of the same configuration written by other code: adopt its "
                        "sensitivity and distortion instead of measuring them (the record and report say so)")
    p.add_argument("--reuse-search", action="append", default=[], metavar="RECORD",
                   help="a NAME.calibration.json of the same fit entries, baseline and operating point: reuse "
                        "every member it scored (with per-entry outcomes; a search it has not finished lends "
                        "the members scored so far), so this search scores only the members it lacks (e.g. "
                        "--attention-blend after the lookup family); repeat for several records (the first "
                        "to score a member lends it)")
    p.add_argument("--out", required=True, help="policy file; per-budget files and the report go beside it")


@command("calibrate", "measure sensitivity S and distortion D on calib data; write calibrated policies", _setup)
def run(args: argparse.Namespace) -> int:
    import sys

    from sglang_pask.calibrate.pipeline import Config, ReuseError, budget_path, calibrate
    from sglang_pask.policy.operating_point import OperatingPointError, SegmentRule

    try:
        try:
            rule = SegmentRule(**SegmentRule.overrides(args))
        except OperatingPointError as e:
            raise ValueError(e.named(SegmentRule.flag_names())) from None
        cfg = Config(model=args.model, data=args.data, groups=args.groups, budgets=args.budgets, out=args.out,
                     schedule=args.schedule, interval=args.interval, seed=args.seed, fit_n=args.fit_n,
                     probe_n=args.probe_n, max_tokens=args.max_tokens, tool_choice=args.tool_choice,
                     main_budget=args.main_budget, segment_rule=rule, prefill_memo_mb=args.prefill_memo_mb,
                     check_n=args.check_n, signal=args.sensitivity_signal,
                     search_passes=args.search_passes, search_objective=args.search_objective,
                     reuse_stages=args.reuse_stages, attention_blend=args.attention_blend,
                     search_start=args.search_start, scorer=args.scorer, equal_pools=args.equal_pools,
                     baseline=args.baseline, folds=args.folds, reuse_search=tuple(args.reuse_search))
        from pathlib import Path

        for flag, path in (("--reuse-stages", cfg.reuse_stages), *(("--reuse-search", r) for r in cfg.reuse_search)):
            if path and not Path(path).is_file():
                raise ValueError(f"{flag} {path}: no such file")
    except ValueError as e:
        print(f"pask calibrate: {e}", file=sys.stderr)
        return 2
    try:
        doc = calibrate(cfg)
    except ReuseError as e:
        print(f"pask calibrate: {e}", file=sys.stderr)
        return 2
    for b in cfg.budgets:
        s = doc["search"][f"{b:g}"]
        best = s["rows"][s["best"]]
        fit = next((f"{_FORCED_NAMES[o]} {best[o]:.4f}" for o in _FORCED_NAMES if o in best), None) \
            or f"{100 * best['accuracy']:.1f}"
        line = f"b={b:g}: {best['label']} fit {fit}"
        if "kfold" in s and "accuracy" in best:
            line += f", {s['kfold']['k']}-fold {100 * s['kfold']['estimate']:.1f}"
        c = doc.get("check", {}).get(f"{b:g}")
        if c:
            line += (f"; check n={c['n']} pask {100 * c['pask']:.1f} vs {c.get('baseline_method', 'snapkv')} "
                     f"{100 * c['baseline']:.1f}, "
                     f"diff {100 * c['diff']:+.1f} [{100 * c['ci'][0]:+.1f}, {100 * c['ci'][1]:+.1f}]")
        print(f"{budget_path(cfg.out, b)}: {line}")
    print(f"wrote {cfg.out} (b={cfg.main_budget:g}) and its report "
          f"{cfg.out.rsplit('.', 1)[0]}.calibration.md")
    return 0


def _ablate_setup(p: argparse.ArgumentParser) -> None:
    from sglang_pask.calibrate.ablation import ABLATIONS

    p.add_argument("file", help="the policy to ablate")
    p.add_argument("--variant", required=True, choices=ABLATIONS)
    p.add_argument("--out", required=True, help="policy file to write")


@command("policy ablate", "write a policy with one part taken out (floors or residual steering)", _ablate_setup)
def policy_ablate(args: argparse.Namespace) -> int:
    import sys

    from sglang_pask.calibrate.ablation import ablate
    from sglang_pask.policy import PolicyError, load_policy, save_policy

    try:
        p = ablate(load_policy(args.file), args.variant)
    except PolicyError as e:
        print(f"pask policy ablate: {e}", file=sys.stderr)
        return 1
    save_policy(p, args.out)
    print(f"wrote {args.out}: {p.name}")
    return 0


def _pools_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the policy to measure (rewritten with its pools block unless --dry-run)")
    p.add_argument("--model", required=True, help="model directory (the policy's model)")
    p.add_argument("--data", required=True, help="calib or train prompts, e.g. synthetic:calib:40:tiny or "
                   "bfcl:all:calib=25 (never eval)")
    p.add_argument("--max-tokens", type=int, default=128, help="generation limit (default 128)")
    p.add_argument("--tool-choice", default="required", choices=("auto", "required"))
    p.add_argument("--dry-run", action="store_true", help="print the shares, leave the file as it is")
    _take_options(p)


@command("policy pools", "measure what each layer group of a policy holds and record it (the server sizes its "
         "per-group KV pools by it)", _pools_setup)
def policy_pools(args: argparse.Namespace) -> int:
    import sys
    import time

    import sglang_pask
    from sglang_pask.calibrate import scorer as sc
    from sglang_pask.calibrate.pools import measure_pools, with_pools
    from sglang_pask.eval.harness import Settings
    from sglang_pask.policy import PolicyError, load_policy, save_policy

    try:
        policy = load_policy(args.file, model_dir=args.model)
        entries = sc.entries_of(args.data, args.n, args.skip)  # refuses the eval split
    except (PolicyError, ValueError) as e:
        print(f"pask policy pools: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runner = sglang_pask.load_runner(args.model)
    spec = args.data if args.n is None else f"{args.data} (--n {args.n} --skip {args.skip})"
    try:
        pools = measure_pools(runner, policy, entries, Settings(max_tokens=args.max_tokens,
                                                                  tool_choice=args.tool_choice), spec)
    except ValueError as e:
        print(f"pask policy pools: {e}", file=sys.stderr)
        return 1
    mean = sum(s * len(g) for s, g in zip(pools.share, policy.groups)) / sum(len(g) for g in policy.groups)
    print(f"{args.file}: budget {policy.budget:g}, groups {policy.groups}: held share "
          f"{', '.join(f'{s:.3f}' for s in pools.share)} (layer mean {mean:.3f}) on {pools.entries} entries of "
          f"{spec}, {time.perf_counter() - t0:.0f} s")
    if not args.dry_run:
        save_policy(with_pools(policy, pools), args.file)
        print(f"wrote {args.file} (its pools block; its policy hash is unchanged)")
    return 0


def _fit_scorer_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--data", required=True, help="train prompts, e.g. synthetic:train:300:tiny (train or calib "
                   "splits only; never eval)")
    p.add_argument("--out", required=True, help="scorer file to write (.safetensors; its sha256 is printed)")
    p.add_argument("--seed", type=int, default=0, help="which prompts hold out for the penalty (default 0)")
    p.add_argument("--val-n", type=int, default=50, help="held-out prompts that choose each layer's penalty "
                   "(default 50)")
    p.add_argument("--n-sink", type=int, default=4, help="first positions left out of fitting (default 4, KVzip's)")
    _take_options(p)


def _take_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=None, help="read N of the split's entries, taken round-robin over "
                   "its categories (default: every entry; a large split such as bfcl:all:calib=25 needs it)")
    p.add_argument("--skip", type=int, default=0, help="with --n: after the first SKIP of that order (a "
                   "held-out sample disjoint from a fit's --n N: --skip N)")


@command("fit-scorer", "fit the learned scorer (KVzap, linear) to KVzip's scores on train prompts", _fit_scorer_setup)
def fit_scorer(args: argparse.Namespace) -> int:
    import os
    import sys

    from sglang_pask.calibrate import scorer as sc
    from sglang_pask.policy.binding import ModelBinding

    try:
        entries = sc.entries_of(args.data, args.n, args.skip)  # refuses the eval split
    except ValueError as e:
        print(f"pask fit-scorer: {e}", file=sys.stderr)
        return 2
    elapsed = sc.timer()
    samples = sc.collect(args.model, entries, args.n_sink)
    t_collect = elapsed()
    scorer = sc.fit(samples, ModelBinding.from_model(args.model), model_path=os.path.normpath(args.model),
                    spec=args.data, seed=args.seed, val_n=args.val_n, n_sink=args.n_sink,
                    sample=sc.take(args.n, args.skip))
    sha = scorer.save(args.out)
    c = scorer.header["counts"]
    print(f"fitted on {c['prompts_fit']} prompts ({c['positions_fit']} positions), penalty chosen on "
          f"{c['prompts_val']} held-out {scorer.header['data']['split']} prompts ({c['positions_val']} positions)")
    for li, m in enumerate(scorer.header["fit"]["layers"]):
        print(f"layer {li}: lambda {m['lambda']:g}, held-out R2 per KV head "
              + " ".join(f"{v:.3f}" for v in m["val_r2"]))
    print(f"took {elapsed():.1f}s ({t_collect:.1f}s rendering, prefill and KVzip's scores; "
          f"{elapsed() - t_collect:.1f}s fitting)")
    print(f"wrote {args.out} sha256 {sha}")
    return 0


def _scorer_report_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--scorer", required=True, help="scorer file (pask fit-scorer)")
    p.add_argument("--data", required=True, help="held-out prompts, e.g. synthetic:calib:100:tiny (train or calib "
                   "splits only; never eval)")
    p.add_argument("--out", required=True, help="folder for report.md and fit_quality.json")
    _take_options(p)


@command("scorer-report", "the learned scorer's fit quality against KVzip's scores on held-out prompts",
         _scorer_report_setup)
def scorer_report(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    from sglang_pask.calibrate import scorer as sc
    from sglang_pask.methods.learned import LearnedScorer, ScorerError, scorer_sha256
    from sglang_pask.policy.binding import ModelBinding

    try:
        sc.check_split(args.data)
        scorer = LearnedScorer.load(args.scorer, ModelBinding.from_model(args.model), args.model)
    except (ValueError, ScorerError) as e:
        print(f"pask scorer-report: {e}", file=sys.stderr)
        return 2
    fitted = scorer.header.get("data", {})
    try:
        entries = sc.entries_of(args.data, args.n, args.skip)
    except ValueError as e:
        print(f"pask scorer-report: {e}", file=sys.stderr)
        return 2
    seen = set(fitted.get("fit_ids", [])) | set(fitted.get("val_ids", []))
    if overlap := [e.id for e in entries if e.id in seen]:
        print(f"pask scorer-report: {len(overlap)} of the {len(entries)} prompts of {args.data} (e.g. "
              f"{overlap[0]}) are ones the scorer was fitted on; measure on held-out prompts"
              + (" (--n N --skip M: another part of the split)" if args.n else ""), file=sys.stderr)
        return 2
    elapsed = sc.timer()
    n_sink = int(scorer.header.get("targets", {}).get("n_sink", 4))
    samples = sc.collect(args.model, entries, n_sink)
    q = sc.quality(scorer, samples, n_sink)
    took = sc.described({"spec": args.data, "sample": sc.take(args.n, args.skip)})
    q.update(model=args.model, scorer=args.scorer, scorer_sha256=scorer_sha256(args.scorer), data=took,
             n_sink=n_sink, scorer_data=sc.described(fitted), seconds=round(elapsed(), 1))
    text = (f"# Learned scorer fit quality\n\nScorer `{args.scorer}` (sha256 `{q['scorer_sha256']}`, fitted on "
            f"`{q['scorer_data']}`) against KVzip's scores on `{q['data']}`: {q['prompts']} prompts, "
            f"{q['positions']} non-sink positions (the first {n_sink} left out). Per prompt, then averaged: "
            "Spearman's rank correlation; recall@f = |top-k(predicted) ∩ top-k(KVzip)| / k with k = f x the "
            "prompt's non-sink positions, per layer and KV head; pooled = every (layer, head, position) of a "
            "prompt ranked together.\n\n" + sc.table(q) + "\n\n"
            f"Command: `pask scorer-report --model {args.model} --scorer {args.scorer} --data {took} "
            f"--out {args.out}`\n")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.md"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(args.out, "fit_quality.json"), "w", encoding="utf-8") as f:
        json.dump(q, f, indent=1, sort_keys=True)
        f.write("\n")
    print(sc.table(q))
    print(f"({q['prompts']} prompts of {args.data}, {q['seconds']}s) wrote {args.out}/report.md, fit_quality.json")
    return 0
