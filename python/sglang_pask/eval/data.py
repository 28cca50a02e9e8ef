"""Evaluation entries: BFCL's 8 AST categories from the installed bfcl-eval, synthetic sets, files.

An :class:`Entry` is one BFCL-format test case joined with its ``possible_answer``. Data specs
(the ``--data`` flag):

  ``bfcl:all``                          the 8 AST categories
  ``bfcl:simple_python,live_multiple``  a comma list of them
  ``bfcl:CATS:eval=K[:seed=S]``         a fixed, seeded, stratified subset: per category the K
                                        entries first in the order of sha256(seed, id) (all of a
                                        category with <= K), e.g. ``bfcl:all:eval=25`` (seed 0)
  ``bfcl:CATS:calib=K[:seed=S]``        the rest of each category in that order: disjoint by id
                                        from ``eval=K`` with the same seed (for ``pask calibrate``)
  ``bfcl:CAT=K,CAT=K:eval[:seed=S]``    per-category sizes (a category's own ``=K`` wins over a
                                        default ``eval=K``), e.g. ``bfcl:simple_python=90,multiple=50:eval``
  ``...:exclude=RECORD``                 drop the entries a calibration used (``RECORD``: the
                                        ``.calibration.json`` that ``pask calibrate`` wrote; its own
                                        data spec, seed and sizes say which), so an eval subset larger
                                        than the one that calibration held out stays disjoint from it
  ``synthetic:SPLIT:N[:PROFILE]``       N generated entries of split train|calib|eval (synthetic.py)
  ``synthetic:SPLIT:N[:PROFILE]:group=K`` the same in blocks of K (1..64) consecutive entries
                                        sharing one tools block, e.g. ``synthetic:eval:200:tiny:group=10``
  ``synthetic:...:exclude=RECORD``      without the entries a calibration used (the first N of a
                                        split are the same for every larger N), e.g.
                                        ``synthetic:calib:800:tiny:exclude=R`` after a calibration on
                                        ``synthetic:calib:600:tiny``: the 200 calib entries it never read
  ``...:distractors=N``                 a catalog: every entry's prompt offers its own tools plus N
                                        distractor tools from the other entries of the spec (none
                                        named as one of its own; shuffled; seeded by the spec's seed);
                                        BFCL's checker still scores against the entry's own tools
  ``file:PATH``                         a directory written by ``synthetic.write_dataset`` (or any
                                        ``<category>.jsonl`` + ``possible_answer/<category>.jsonl``)

BFCL files are JSON Lines aligned by line index with their possible_answer file (ids checked).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from sglang_pask.eval.entry import Entry, entry_from_bfcl  # re-exported: the entry data model

__all__ = [
    "Entry",
    "BFCL_CATEGORIES",
    "NON_LIVE",
    "LIVE",
    "load_bfcl",
    "load_dir",
    "load_spec",
    "parse_spec",
    "stratified",
    "calibration_split",
    "calibration_ids",
    "entry_from_bfcl",
]

NON_LIVE = ("simple_python", "multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
BFCL_CATEGORIES = NON_LIVE + LIVE


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _bfcl_data_dir() -> Path:
    return Path(str(resources.files("bfcl_eval") / "data"))


def load_bfcl(categories: list[str] | tuple[str, ...] = BFCL_CATEGORIES) -> list[Entry]:
    """Entries of the given BFCL AST categories, in category then file order."""
    try:
        data = _bfcl_data_dir()
    except ModuleNotFoundError as e:
        raise RuntimeError("bfcl-eval is not installed: pip install --no-deps -r requirements/eval.txt") from e
    out: list[Entry] = []
    for cat in categories:
        if cat not in BFCL_CATEGORIES:
            raise ValueError(f"unknown BFCL category {cat!r}; known: {', '.join(BFCL_CATEGORIES)}")
        prompts = _jsonl(data / f"BFCL_v4_{cat}.json")
        answers = _jsonl(data / "possible_answer" / f"BFCL_v4_{cat}.json")
        if len(prompts) != len(answers):
            raise ValueError(f"{cat}: {len(prompts)} prompts but {len(answers)} answers")
        out.extend(entry_from_bfcl(p, a, cat) for p, a in zip(prompts, answers))
    return out


def load_dir(path: str | Path) -> list[Entry]:
    """Entries from ``<dir>/<category>.jsonl`` + ``<dir>/possible_answer/<category>.jsonl``."""
    root = Path(path)
    files = sorted(root.glob("*.jsonl"))
    if not files:
        raise ValueError(f"{root}: no <category>.jsonl files")
    out: list[Entry] = []
    for f in files:
        cat = f.stem
        prompts, answers = _jsonl(f), _jsonl(root / "possible_answer" / f.name)
        if len(prompts) != len(answers):
            raise ValueError(f"{f}: {len(prompts)} prompts but {len(answers)} answers")
        out.extend(entry_from_bfcl(p, a, cat) for p, a in zip(prompts, answers))
    return out


def _parse_bfcl(spec: str, rest: str) -> dict:
    form = "bfcl:CATS[:eval=K|:calib=K][:seed=S][:exclude=RECORD][:distractors=N] (CATS: all or CAT[=K],...)"
    cats_part, *opts = rest.split(":")
    sizes: dict[str, int] = {}
    cats = []
    for item in ([] if cats_part in ("", "all") else cats_part.split(",")):
        cat, eq, k = item.strip().partition("=")
        if eq:
            if not k.isdigit() or int(k) < 1:
                raise ValueError(f"bad spec {spec!r}: {cat}={k!r} must be a positive integer")
            sizes[cat] = int(k)
        if cat:
            cats.append(cat)
    cats = cats or list(BFCL_CATEGORIES)
    out: dict = {"spec": spec, "kind": "bfcl", "categories": cats}
    for opt in opts:
        key, eq, value = opt.partition("=")
        if key in ("eval", "calib") and not eq and sizes and "split" not in out:
            out["split"] = key
            continue
        if not eq or key not in ("eval", "calib", "seed", "exclude", "distractors") or key in out or (
                key in ("eval", "calib") and "split" in out):
            raise ValueError(f"bad spec {spec!r}: unknown or repeated option {opt!r} (expected {form})")
        if key == "exclude":
            out["exclude"] = value
            continue
        if not value.isdigit() or (key != "seed" and int(value) < 1):
            kind = "non-negative" if key == "seed" else "positive"
            raise ValueError(f"bad spec {spec!r}: {key}={value!r} must be a {kind} integer")
        if key in ("seed", "distractors"):
            out[key] = int(value)
        else:
            out["split"], out["per_category"] = key, int(value)
    if ("seed" in out or sizes) and "split" not in out:
        what = "seed=" if "seed" in out else "CAT=K"
        raise ValueError(f"bad spec {spec!r}: {what} needs eval=K or calib=K (expected {form})")
    missing = [c for c in cats if c not in sizes and "per_category" not in out]
    if "split" in out and missing:
        raise ValueError(f"bad spec {spec!r}: no size for {', '.join(missing)} (give CAT=K or eval=K)")
    if sizes:
        out["sizes"] = sizes
    if "split" in out:
        out.setdefault("seed", 0)
    return out


def bfcl_order(entries: list[Entry], seed: int) -> list[Entry]:
    """One category's entries in the seeded order the ``eval=K`` / ``calib=K`` subsets cut: by
    sha256 of ``"<seed>:<id>"`` (independent of file order; ids are unique per category)."""
    import hashlib

    return sorted(entries, key=lambda e: hashlib.sha256(f"{seed}:{e.id}".encode()).hexdigest())


def _bfcl_subset(d: dict) -> list[Entry]:
    """The entries of a parsed bfcl spec: every entry, or per category the first ``K`` of
    :func:`bfcl_order` (``eval``) or the rest (``calib``); without those a calibration's entries
    (``exclude``)."""
    entries = load_bfcl(d["categories"])
    if "split" in d:
        out: list[Entry] = []
        for cat in d["categories"]:
            ordered = bfcl_order([e for e in entries if e.category == cat], d["seed"])
            k = d.get("sizes", {}).get(cat, d.get("per_category"))
            out.extend(ordered[:k] if d["split"] == "eval" else ordered[k:])
        entries = out
    if "exclude" in d:
        used = calibration_ids(d["exclude"])
        entries = [e for e in entries if (e.category, e.id) not in used]
    return entries


def calibration_split(entries: list, seed: int, fit_n: int, probe_n: int, check_n: int | None):
    """The entries a calibration uses, as ``pask calibrate`` cuts them: a seeded permutation; the
    first ``fit_n`` fit (the first ``probe_n`` of them probe S and D), then ``check_n`` held-out
    check entries (every other one when None). Returns ``(probe, fit, check)``."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(entries))
    fit = [entries[i] for i in order[:fit_n]]
    rest = order[fit_n:] if check_n is None else order[fit_n: fit_n + check_n]
    return fit[:probe_n], fit, [entries[i] for i in rest]


def calibration_ids(record: str | Path) -> set[tuple[str, str]]:
    """``(category, id)`` of every entry the calibration that wrote ``record`` (its
    ``.calibration.json``) used: fit and check."""
    path = Path(record)
    try:
        cfg = json.loads(path.read_text())["config"]
        spec, seed, fit_n, probe_n = cfg["data"], cfg["seed"], cfg["fit_n"], cfg["probe_n"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"exclude={record}: not a calibration record ({type(e).__name__}: {e})") from e
    if parse_spec(spec).get("exclude"):
        raise ValueError(f"exclude={record}: its data spec {spec!r} excludes again; give the first record")
    _, fit, check = calibration_split(load_spec(spec), seed, fit_n, probe_n, cfg.get("check_n"))
    return {(e.category, e.id) for e in fit + check}


def stratified(entries: list[Entry], n: int) -> list[Entry]:
    """The first ``n`` of ``entries`` taken round-robin over their categories (in order of first
    appearance; each category's own order kept), so a small sample spans every category."""
    by_cat: dict[str, list[Entry]] = {}
    for e in entries:
        by_cat.setdefault(e.category, []).append(e)
    out: list[Entry] = []
    for i in range(max((len(v) for v in by_cat.values()), default=0)):
        out.extend(v[i] for v in by_cat.values() if i < len(v))
    return out[:n]


def _parse_synthetic(spec: str, rest: str) -> dict:
    form = "synthetic:SPLIT:N[:PROFILE][:group=K][:exclude=RECORD][:distractors=N]"
    parts = rest.split(":")
    options = {}
    while len(parts) > 2 and "=" in parts[-1]:
        key, _, value = parts.pop().partition("=")
        if key not in ("group", "exclude", "distractors") or key in options:
            raise ValueError(f"bad spec {spec!r}: unknown or repeated option {key!r} (expected {form})")
        options[key] = value
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        raise ValueError(f"bad spec {spec!r}: expected {form}")
    profile = parts[2] if len(parts) == 3 else "bfcl_like"
    out = {"spec": spec, "kind": "synthetic", "split": parts[0], "n": int(parts[1]), "profile": profile}
    if "exclude" in options:
        out["exclude"] = options["exclude"]
    if "distractors" in options:
        value = options["distractors"]
        if not (value.isdigit() and int(value) >= 1):
            raise ValueError(f"bad spec {spec!r}: distractors={value!r} must be a positive integer")
        if "group" in options:
            raise ValueError(f"bad spec {spec!r}: distractors= gives each entry its own catalog; group= shares "
                             "one tools block: use one of them")
        out["distractors"] = int(value)
    if "group" in options:
        from sglang_pask.eval.synthetic import GROUP_MAX

        value = options["group"]
        if not (value.isdigit() and 1 <= int(value) <= GROUP_MAX):
            raise ValueError(f"bad spec {spec!r}: group={value!r} must be an integer in [1, {GROUP_MAX}]")
        out["group"] = int(value)
    return out


def parse_spec(spec: str) -> dict:
    """The ``--data`` spec resolved: ``{"spec", "kind", ...}`` with ``categories`` (bfcl),
    ``split`` / ``n`` / ``profile`` and, when the spec names it, ``group`` (synthetic) or ``path``
    (file). Raises ValueError if malformed."""
    kind, _, rest = spec.partition(":")
    if kind == "bfcl":
        return _parse_bfcl(spec, rest)
    if kind == "synthetic":
        return _parse_synthetic(spec, rest)
    if kind == "file":
        return {"spec": spec, "kind": kind, "path": rest}
    raise ValueError(f"bad data spec {spec!r}: expected bfcl:..., synthetic:SPLIT:N or file:DIR")


def load_spec(spec: str) -> list[Entry]:
    """Entries for one ``--data`` spec (see the module docstring)."""
    d = parse_spec(spec)
    entries = _load(d)
    if d.get("distractors"):
        from sglang_pask.eval.entry import with_distractors

        entries = with_distractors(entries, d["distractors"], d.get("seed", 0))
    return entries


def _load(d: dict) -> list[Entry]:
    if d["kind"] == "bfcl":
        return _bfcl_subset(d)
    if d["kind"] == "synthetic":
        from sglang_pask.eval import synthetic

        entries = synthetic.generate(split=d["split"], n=d["n"], profile=d["profile"], group=d.get("group", 1))
        if "exclude" in d:
            used = calibration_ids(d["exclude"])
            entries = [e for e in entries if (e.category, e.id) not in used]
        return entries
    return load_dir(d["path"])
