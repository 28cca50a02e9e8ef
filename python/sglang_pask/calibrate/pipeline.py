"""``pask calibrate`` end to end: measure S and D, compile the family, search it per budget, check
the chosen policy on held-out calibration entries, write the policies and the report.

Entries (all from the ``--data`` spec, which must be a calibration split): a seeded permutation;
the first ``fit_n`` are the **fit** entries (S and D use the first ``probe_n`` of them, the family
search all of them), the rest the **check** entries (the chosen policies vs SnapKV, never used to
choose; and what each group of a chosen policy holds, its ``pools`` block:
:mod:`~sglang_pask.calibrate.pools`). Outputs, for ``--out DIR/NAME.json`` and budgets ``b``:
``DIR/NAME.b<b>.json`` per budget, ``DIR/NAME.json`` (the ``main_budget`` one),
``DIR/NAME.calibration.json`` (every measurement: the cache a rerun with the same configuration
resumes from), ``DIR/NAME.calibration.md`` and the ``NAME.S.png`` / ``NAME.D.png`` heatmaps.
Policies hold no timing, so they are byte-identical across runs with the same seed, data and code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

import sglang_pask
from sglang_pask.calibrate.distortion import measure_distortion
from sglang_pask.calibrate.family import (
    AXES,
    BLEND_AXES,
    JOINT_RANKS,
    LEARNED_AXES,
    LEARNED_SCORERS,
    SCORERS,
    Member,
    compile_policy,
    equal_pools,
    joint_score,
    parse_start,
    sensitivity_score,
)
from sglang_pask.calibrate.pools import measure_pools, with_pools
from sglang_pask.calibrate.search import OBJECTIVES, check_policy, max_members, search_budget
from sglang_pask.calibrate.sensitivity import SIGNALS, joint_units, measure_joint, measure_sensitivity, work_units
from sglang_pask.eval.data import load_spec, parse_spec
from sglang_pask.eval.harness import Settings, build_request
from sglang_pask.eval.hf_backend import runner_body
from sglang_pask.policy.binding import ModelBinding
from sglang_pask.policy.document import save_policy
from sglang_pask.policy.operating_point import OperatingPoint, SegmentRule
from sglang_pask.policy.prior import even_groups
from sglang_pask.policy.schema import PoolsModel
from sglang_pask.rendering import render_chat

__all__ = ["Config", "ReuseError", "adopt_stages", "calibrate", "budget_path"]


@dataclass(frozen=True)
class Config:
    model: str
    data: str
    groups: int
    budgets: tuple
    out: str
    schedule: str = "prefill"
    interval: int = 1
    seed: int = 0
    fit_n: int = 60
    probe_n: int = 40
    max_tokens: int = 128
    tool_choice: str = "required"
    main_budget: float = 0.33
    #: the runner's shared-segment rule the search and check score under (``none``: the whole
    #: prompt per request; ``system``: the tools block compressed alone, as a server with the
    #: radix cache on, and each request's own tokens at its own budget)
    segment_rule: SegmentRule = field(default_factory=SegmentRule)
    #: MiB of prompt forwards kept for reuse across probes and members (:mod:`sglang_pask.hf.memo`;
    #: 0: none). Results are the same with any size, so it is not part of :meth:`record_key`.
    prefill_memo_mb: int = 2048
    #: held-out check entries (None: every calib entry outside the fit set)
    check_n: Optional[int] = None
    #: what each sensitivity probe measures (:data:`~.sensitivity.SIGNALS`): ``both`` (generation +
    #: AST check, and the gold NLL) or ``nll`` (the teacher-forced gold NLL only, no generation)
    signal: str = "both"
    #: passes of the coordinate search over the family's axes (:func:`~.search.coordinate_search`)
    search_passes: int = 2
    #: what the search maximises (:data:`~.search.OBJECTIVES`); the held-out check always generates
    search_objective: str = "accuracy"
    #: a calibration record (``NAME.calibration.json``) of the same configuration written by other
    #: code, whose measured stages (sensitivity, distortion) this run adopts instead of measuring
    #: them again; the record says so (``reused``). Not part of :meth:`record_key`.
    reuse_stages: Optional[str] = None
    #: a calibration record of the same fit entries, baseline and operating point (any budgets,
    #: axes, passes or code): its scored members (each with per-entry outcomes) are reused, so this
    #: search scores only members it lacks -- e.g. the attention-informed family after the lookup
    #: one. Not part of :meth:`record_key`; the record says what was reused.
    #: NAME.calibration.json records whose scored members this search takes (:func:`reused_rows`)
    reuse_search: tuple = ()
    #: search :data:`~.family.BLEND_AXES` (the attention-informed residual) instead of :data:`~.family.AXES`
    attention_blend: bool = False
    #: the registry method every member and the check are paired with (the strongest on calib)
    baseline: str = "snapkv"
    #: k > 1: the k-fold estimate of the search on the fit entries (:mod:`.kfold`); 0: none
    folds: int = 0
    #: where the search starts (:func:`~.family.parse_start`; empty: :data:`~.family.START`)
    search_start: str = ""
    #: the learned scorer file (``pask fit-scorer``) the attention-informed family reads in place of
    #: the attention statistics (:data:`~.family.LEARNED_AXES`); empty: KVzip's and SnapKV's
    scorer: str = ""
    #: only members the server's per-group pools hold at the budget (:func:`~.family.equal_pools`)
    equal_pools: bool = False

    @property
    def axes(self) -> dict:
        """The family axes the search visits."""
        if not self.attention_blend:
            return AXES
        axes = LEARNED_AXES if self.scorer else BLEND_AXES
        return equal_pools(axes) if self.equal_pools else axes

    @property
    def scorer_pin(self) -> Optional[tuple[str, str]]:
        """``(path, sha256)`` of :attr:`scorer`, or None."""
        if not self.scorer:
            return None
        from sglang_pask.methods.learned import scorer_sha256

        return self.scorer, scorer_sha256(self.scorer)

    @property
    def point(self) -> OperatingPoint:
        """The operating point every scoring run uses, recorded in the policies written."""
        return OperatingPoint(self.schedule, self.interval, self.segment_rule)

    def record_key(self) -> dict:
        """What a resumed run must match (the segment rule flat, as earlier records hold it:
        fields at their defaults are left out, so older records still match)."""
        key = {k: v for k, v in asdict(self).items()
               if k not in ("out", "segment_rule", "interval", "prefill_memo_mb", "check_n", "signal",
                            "search_passes", "search_objective", "reuse_stages", "attention_blend",
                            "baseline", "folds", "reuse_search", "search_start", "scorer", "equal_pools")}
        if self.check_n is not None:
            key["check_n"] = self.check_n
        rule = self.segment_rule.record()
        key["segment"], key["own_budget"] = rule["segment"], rule["own_budget"]
        if self.interval != 1:
            key["interval"] = self.interval
        if self.signal != "both":
            key["signal"] = self.signal
        if self.search_passes != 2:
            key["search_passes"] = self.search_passes
        if self.search_objective != "accuracy":
            key["search_objective"] = self.search_objective
        if self.attention_blend:
            key["attention_blend"] = True
        # always named: records written before SnapKV became per-head by default, which name no
        # baseline, paired with SnapKV per layer and must not match a run paired per head
        key["baseline"] = self.baseline
        if self.folds:
            key["folds"] = self.folds
        if self.search_start:
            key["search_start"] = self.search_start
        if self.scorer:  # the scorer's bytes, not where its file lies
            key["scorer_sha256"] = self.scorer_pin[1]
        if self.equal_pools:
            key["equal_pools"] = True
        for k in ("segment_budget", "segment_prefill"):
            if rule[k] != SegmentRule().record()[k]:
                key[k] = rule[k]
        key["budgets"] = list(self.budgets)
        return key

    def __post_init__(self):
        OperatingPoint(self.schedule, self.interval, self.segment_rule)  # validates schedule and interval
        spec = parse_spec(self.data)
        if spec.get("split") != "calib":
            raise ValueError("--data must be a calibration split (synthetic:calib:N[:PROFILE], or "
                             f"bfcl:CATS:calib=K: BFCL outside the eval=K subset), got {self.data!r}")
        if not 1 <= self.probe_n <= self.fit_n:
            raise ValueError(f"need 1 <= --probe-n ({self.probe_n}) <= --fit-n ({self.fit_n})")
        if self.check_n is not None and self.check_n < 1:
            raise ValueError(f"--check-n must be >= 1, got {self.check_n}")
        if self.signal not in SIGNALS:
            raise ValueError(f"--sensitivity-signal must be one of {', '.join(SIGNALS)}, got {self.signal!r}")
        if self.search_objective not in OBJECTIVES:
            raise ValueError(f"--search-objective must be one of {', '.join(OBJECTIVES)}, "
                             f"got {self.search_objective!r}")
        if self.search_passes < 1:
            raise ValueError(f"--search-passes must be >= 1, got {self.search_passes}")
        if self.prefill_memo_mb < 0:
            raise ValueError(f"--prefill-memo-mb must be >= 0, got {self.prefill_memo_mb}")
        start = parse_start(self.search_start)  # raises naming a bad field
        if (start.blend or start.scorer != "window" or start.split != "share") and not self.attention_blend:
            raise ValueError(f"--search-start {self.search_start}: an attention-informed start needs --attention-blend")
        if self.scorer and not self.attention_blend:
            raise ValueError("--scorer is read by the attention-informed family: add --attention-blend")
        if self.equal_pools and not self.attention_blend:
            raise ValueError("--equal-pools restricts the attention-informed family: add --attention-blend")
        if self.equal_pools and (start.split != "share" or SCORERS[start.scorer][1]):
            raise ValueError(f"--search-start {self.search_start}: --equal-pools searches split=share and a "
                             "scorer not per KV head; start there")
        if self.scorer:
            from sglang_pask.methods.learned import LearnedScorer, ScorerError
            from sglang_pask.policy.binding import ModelBinding

            try:
                LearnedScorer.load(self.scorer, ModelBinding.from_model(self.model), self.model)
            except ScorerError as e:
                raise ValueError(f"--scorer: {e}") from None
        learned = start.scorer in LEARNED_SCORERS
        if start.blend and learned != bool(self.scorer):
            raise ValueError(f"--search-start {self.search_start}: scorer={start.scorer} "
                             + ("needs --scorer FILE" if learned else "is not in the learned family (--scorer): "
                                f"use one of {', '.join(LEARNED_SCORERS)}"))
        if self.folds == 1 or self.folds < 0 or self.folds > self.fit_n:
            raise ValueError(f"--folds must be 0 (none) or in 2..--fit-n ({self.fit_n}), got {self.folds}")
        from sglang_pask.methods import METHODS, make_method
        from sglang_pask.methods.options import parse_method_spec
        from sglang_pask.methods.segment import check_method

        name, opts = parse_method_spec(self.baseline)
        if name not in METHODS or name == "pask":
            raise ValueError(f"--baseline must be a registry method other than pask, with options as "
                             f"`pask eval --method-opt` takes them (e.g. snapkv:per_head=false; methods: "
                             f"{', '.join(m for m in METHODS if m != 'pask')}), got {self.baseline!r}")
        try:
            base = make_method(name, self.main_budget, **opts)
            if self.segment_rule.active:
                check_method(base)
        except (TypeError, ValueError) as e:
            hint = " (under --segment system; e.g. snapkv:per_head=false)" if self.segment_rule.active else ""
            raise ValueError(f"--baseline {self.baseline}: {e}{hint}") from None
        if self.main_budget not in self.budgets:
            raise ValueError(f"--main-budget {self.main_budget:g} is not one of --budgets")


def budget_path(out: str | os.PathLike, budget: float) -> Path:
    """``DIR/NAME.b<budget>.json`` for ``--out DIR/NAME.json``."""
    p = Path(out)
    return p.with_name(f"{p.stem}.b{budget:g}{p.suffix}")


def code_version() -> tuple[str, str]:
    """(``sglang_pask <version> git <commit>[-dirty]``, the commit's date): the package's source
    tree (``-dirty``: tracked files under python/ differ from the commit)."""
    root = Path(sglang_pask.__file__).resolve().parents[2]

    def git(*a):
        return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = "-dirty" if git("status", "--porcelain", "--untracked-files=no", "--", "python") else ""
    return f"sglang_pask {sglang_pask.__version__} git {commit}{dirty}", git("log", "-1", "--format=%cI") or "unknown"


def _bar(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)


def _split(entries, cfg: Config):
    from sglang_pask.eval.data import calibration_split

    return calibration_split(entries, cfg.seed, cfg.fit_n, cfg.probe_n, cfg.check_n)


def _cached(path: Path, key: dict) -> dict:
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("config") == key:
            return doc
    return {"config": key}


class ReuseError(ValueError):
    """``--reuse-stages`` names a record of another configuration."""


#: the stages a record of other code can lend (:attr:`Config.reuse_stages`); the search and the
#: check score policies with this code's methods, so they are always run here
REUSABLE_STAGES = ("sensitivity", "distortion", "joint")


#: configuration fields that only the search and the check read: a record that differs in them
#: measured the same sensitivity and distortion
SEARCH_ONLY = ("code", "search_objective", "search_passes", "check_n", "attention_blend", "equal_pools", "baseline",
               "folds", "scorer_sha256")


#: what a record written before a configuration field existed measured under (no segment rule)
LEGACY = {"segment": "none"}


def _matching_record(path: str, key: dict, free: tuple, flag: str) -> tuple[dict, dict]:
    """(the record at ``path``, its configuration), which must equal ``key`` except for the fields
    in ``free`` (ReuseError naming ``flag`` and the first field that differs otherwise)."""
    other = json.loads(Path(path).read_text())
    theirs = dict(other.get("config", {}))
    for k in sorted(set(key) | set(theirs)):
        if k not in free and key.get(k, LEGACY.get(k)) != theirs.get(k, LEGACY.get(k)):
            raise ReuseError(f"{flag} {path}: its {k} is {theirs.get(k)!r}, this run's {key.get(k)!r}")
    return other, theirs


#: fields only the search reads, and which policies a run writes: a record that differs in them
#: measured the same sensitivity (and, at the same budgets, the same distortion)
SEARCH_SIDE = ("search_start", "main_budget")


def adopt_stages(doc: dict, key: dict, path: str) -> list[str]:
    """Copy into ``doc`` the stages it lacks from the record at ``path``, whose configuration must
    equal ``key`` except for the code that wrote it, :data:`SEARCH_ONLY`, :data:`SEARCH_SIDE` and
    the budgets (ValueError naming the first field that differs otherwise); the distortion, which is
    measured per budget, only from a record of the same budgets. Returns the stages adopted;
    ``doc["reused"]`` names them and their code."""
    other, theirs = _matching_record(path, key, SEARCH_ONLY + SEARCH_SIDE + ("budgets",), "--reuse-stages")
    same_budgets = sorted(theirs.get("budgets", [])) == sorted(key.get("budgets", []))
    taken = [s for s in REUSABLE_STAGES if s not in doc and s in other and (s != "distortion" or same_budgets)]
    for s in taken:
        doc[s] = other[s]
        if s in other.get("timings_s", {}):
            doc.setdefault("timings_s", {})[s] = other["timings_s"][s]
    if taken:
        doc.setdefault("reused", {}).update({s: theirs.get("code") for s in taken})
    return taken


#: configuration fields a record whose scored members are reused may differ in (the members are
#: the same policies scored on the same fit entries, paired with the same baseline)
SEARCH_FREE = ("code", "search_passes", "check_n", "attention_blend", "folds", "budgets", "scorer_sha256",
               "equal_pools", "search_start")


def reused_rows(path: str, key: dict, budget: str, passes: int) -> tuple[dict, Optional[list], Optional[str]]:
    """(``{label: row}`` of every member the record at ``path`` scored at ``budget``, the baseline's
    per-entry outcomes where the record holds them, else None, and :func:`passes_warning` for a
    search of ``passes`` passes). The members are its search's rows
    and those only its k-fold scored, or, for a search it has not finished (stopped, or still
    running), the members scored so far; each with per-entry outcomes. Its configuration must
    equal ``key`` except for :data:`SEARCH_FREE` (ReuseError naming the first field that differs
    otherwise); ``{}`` where it scored nothing at ``budget``."""
    other, _ = _matching_record(path, key, SEARCH_FREE, "--reuse-search")
    s = other.get("search", {}).get(budget)
    partial = other.get("search_progress", {}).get(budget, {})
    if s is not None:
        rows, base = s["rows"] + s.get("kfold_rows", []), None
    else:
        rows, base = list(partial.get("rows", {}).values()), partial.get("baseline")
    if any("valid" not in r and "values" not in r for r in rows):
        raise ReuseError(f"--reuse-search {path}: its rows at b={budget} hold no per-entry outcomes "
                         "(written before they were recorded)")
    return {r["label"]: r for r in rows}, base, passes_warning(other, path, budget, passes)


def passes_warning(other: dict, path: str, budget: str, passes: int) -> Optional[str]:
    """A warning when the record ``other`` (read from ``path``) searched with more passes than this
    run (``passes``): members it reached on a later pass are lent, but this run's search follows
    fewer passes and may stop short of its best member (None when it searched as many or fewer)."""
    theirs = int(other.get("config", {}).get("search_passes", 2))
    if theirs <= passes:
        return None
    best = other.get("search", {}).get(budget, {}).get("best_member")
    best = f" ({Member(**best).label})" if best else ""
    return (f"b={budget}: {path} searched with {theirs} passes, this run with {passes}: this search may "
            f"stop short of its best member{best}")


def calibrate(cfg: Config) -> dict:
    """Run the pipeline (module docstring); returns the measurement document (also written)."""
    t0 = time.perf_counter()
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    version, date = code_version()
    key = cfg.record_key()
    key["code"] = version
    meas_path = out.with_name(f"{out.stem}.calibration.json")
    doc = _cached(meas_path, key)
    if cfg.reuse_stages:
        for s in adopt_stages(doc, key, cfg.reuse_stages):
            print(f"pask calibrate: {s} adopted from {cfg.reuse_stages} ({doc['reused'][s]})", file=sys.stderr)
    save = lambda: meas_path.write_text(json.dumps(doc, indent=1) + "\n")  # noqa: E731

    entries = load_spec(cfg.data)
    probe, fit, check = _split(entries, cfg)
    settings = Settings(max_tokens=cfg.max_tokens, tool_choice=cfg.tool_choice)
    runner = sglang_pask.load_runner(cfg.model)
    if cfg.prefill_memo_mb:
        from sglang_pask.hf.memo import PrefillMemo

        runner.memo = PrefillMemo(cfg.prefill_memo_mb << 20)
    binding = ModelBinding.from_model(cfg.model)
    groups = even_groups(binding.num_layers, cfg.groups)
    timings = doc.setdefault("timings_s", {})

    if "sensitivity" not in doc:
        t = time.perf_counter()
        with _bar(work_units(probe, groups, runner, settings), "sensitivity") as bar:
            doc["sensitivity"] = measure_sensitivity(runner, probe, groups, settings, tick=bar.update,
                                                     signal=cfg.signal)
        timings["sensitivity"] = round(time.perf_counter() - t, 1)
        save()
    if "distortion" not in doc:
        t = time.perf_counter()
        with _bar(len(probe), "distortion") as bar:
            doc["distortion"] = measure_distortion(runner, probe, groups, cfg.budgets, settings, tick=bar.update)
        timings["distortion"] = round(time.perf_counter() - t, 1)
        save()
    if "joint" not in doc and any(r in JOINT_RANKS for r in cfg.axes["rank"]):
        t = time.perf_counter()
        with _bar(joint_units(probe, runner, settings), "joint probe") as bar:
            doc["joint"] = measure_joint(runner, probe, binding.num_layers, settings, tick=bar.update,
                                         signal=cfg.signal)
        timings["joint"] = round(time.perf_counter() - t, 1)
        save()
    score = sensitivity_score(doc["sensitivity"])
    joint = joint_score(doc["joint"]) if "joint" in doc else None
    prompt_len = float(np.mean([len(render_chat(runner.tokenizer, runner_body(build_request(e, settings)[0]),
                                                tagger=runner.tagger).token_ids) for e in fit]))
    record = {"data": cfg.data, "split": "calib", "samples": len(probe), "sensitivity": score,
              "distortion": doc["distortion"], "tool_version": version, "date": date, "seed": cfg.seed}
    name = out.stem
    scorer_pin = cfg.scorer_pin
    searches = doc.setdefault("search", {})
    checks = doc.setdefault("check", {})
    chosen = {}
    references: dict = {}  # objective kl: Full KV's forced runs by entry id, shared by the budgets
    for b in cfg.budgets:
        k = f"{b:g}"
        def member_policy(m: Member, b=b, k=k):
            return compile_policy(binding, groups, score, doc["distortion"], b, m, prompt_len, record, f"{name}@{k}",
                                  tokens=doc["sensitivity"].get("tokens"), point=cfg.point, joint=joint,
                                  scorer=scorer_pin)

        if k not in searches:
            t = time.perf_counter()
            # member by member: a rerun resumes from the members scored so far (same code and config)
            partial = doc.setdefault("search_progress", {}).setdefault(k, {})
            if cfg.reuse_search and "reused_rows" not in partial:
                lent_from = []
                for path in cfg.reuse_search:  # the first record to score a member lends it
                    lent, base, warning = reused_rows(path, key, k, cfg.search_passes)
                    fresh = {lab: r for lab, r in lent.items() if lab not in partial.get("rows", {})}
                    partial.setdefault("rows", {}).update(fresh)
                    if base is not None and "baseline" not in partial:
                        partial["baseline"] = base
                    lent_from.append({"record": path, "members": len(fresh)})
                    print(f"pask calibrate: b={k}: {len(fresh)} scored members reused from {path}",
                          file=sys.stderr)
                    if warning:
                        lent_from[-1]["warning"] = warning
                        print(f"pask calibrate: warning: {warning}", file=sys.stderr)
                if not sum(r["members"] for r in lent_from):
                    raise ReuseError(f"--reuse-search: {', '.join(cfg.reuse_search)} scored no member at "
                                     f"b={k} (rerun this command once one has: finished budgets and scored "
                                     "members are kept)")
                partial["reused_rows"] = sorted(partial["rows"])
                doc.setdefault("reused_search", {})[k] = lent_from
            before = partial.get("seconds", 0.0)  # spent by earlier invocations

            def save_progress(before=before, t=t, partial=partial):
                partial["seconds"] = round(before + time.perf_counter() - t, 1)
                save()

            with _bar(1 + max_members(cfg.axes, passes=cfg.search_passes), f"search b={k}") as bar:
                searches[k] = search_budget(runner, member_policy, fit, b, settings, cfg.seed, cfg.point,
                                            tick=bar.update, axes=cfg.axes, passes=cfg.search_passes,
                                            objective=cfg.search_objective, progress=partial, save=save_progress,
                                            references=references, baseline=cfg.baseline, folds=cfg.folds,
                                            start=parse_start(cfg.search_start))
            del doc["search_progress"][k]
            timings[f"search {k}"] = round(before + time.perf_counter() - t, 1)
            save()
        policy = member_policy(Member(**searches[k]["best_member"]))
        save_policy(policy, budget_path(out, b))
        if check and k not in checks:
            t = time.perf_counter()
            checks[k] = check_policy(runner, policy, check, b, settings, cfg.seed, cfg.point, cfg.baseline)
            timings[f"check {k}"] = round(time.perf_counter() - t, 1)
            save()
        # what each group holds (the server sizes its pools by it): measured on the held-out entries
        pools = doc.setdefault("pools", {})
        if k not in pools:
            t = time.perf_counter()
            held_out = check or fit
            pools[k] = measure_pools(runner, policy, held_out, settings,
                                     f"{cfg.data} ({'check' if check else 'fit'} entries)").model_dump(mode="json")
            timings[f"pools {k}"] = round(time.perf_counter() - t, 1)
            save()
        policy = with_pools(policy, PoolsModel(**pools[k]))
        save_policy(policy, budget_path(out, b))
        chosen[b] = policy
    save_policy(chosen[cfg.main_budget], out)
    doc["prompt_len"] = round(prompt_len, 3)
    doc["split_sizes"] = {"probe": len(probe), "fit": len(fit), "check": len(check)}
    timings["total (this invocation)"] = round(time.perf_counter() - t0, 1)
    if runner.memo is not None:
        doc["prefill_memo (this invocation)"] = runner.memo.stats()
    save()
    from sglang_pask.calibrate.report import write_report

    write_report(doc, out, {b: budget_path(out, b) for b in cfg.budgets})
    return doc
