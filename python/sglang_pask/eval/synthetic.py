"""Seeded synthetic function-calling entries in BFCL's format (prompt row + possible_answer row).

Categories (named so BFCL's checker dispatch by substring picks the right path):
  ``synthetic_simple``             1 doc, 1 call
  ``synthetic_multiple``           the right doc + distractor docs, 1 call
  ``synthetic_parallel``           1 doc, several calls with different values
  ``synthetic_parallel_multiple``  several docs, several calls to two or more of them
Entry ``i`` of a split has category ``categories[i % len(categories)]`` and id
``<category>_<split>_<i>``; entry ``i`` does not depend on ``n``, so ``eval:20`` is a prefix of
``eval:200``.

Grouped (``group`` K > 1, to measure prefix sharing of the tools block across requests): entries
come in blocks of K consecutive indices; block ``b = i // K`` has one category,
``categories[b % len(categories)]``, and one list of docs drawn and shuffled once from the block's
own seed (``.../<SPLIT_OFFSET[split] + b>/group<K>``), so its K entries list byte-identical
``function`` JSON in the same order. Each entry draws its own calls, values and query over those
docs (the category's plan, over the docs in an order of its own, so a ``multiple`` block calls
different docs) from seed ``.../<SPLIT_OFFSET[split] + i>/group<K>/<attempt>``, redrawn until the
query hashes into the split and (while the docs allow) differs from the block's earlier queries.
Ids are ``<category>_<split>_g<K>_<i>``; entry ``i`` depends on its block only, so grouped
``eval:20`` is a prefix of grouped ``eval:200``. ``group=1`` (default) is the ungrouped set,
unchanged.

Splits: ``train``, ``calib`` and ``eval`` use disjoint seed ranges (entry ``i`` of a split is
drawn from seed ``SPLIT_OFFSET[split] + i``, offsets 10**8 apart, combined with the ``seed`` knob
and the profile through a string seed) and, in addition, a candidate entry is kept only when
``sha256(user query) % 3`` equals its split's index (else it is redrawn), so no query text can
occur in two splits, whatever the seeds. Same arguments -> byte-identical files.

Ground truth: every parameter maps to a list of allowed values; an optional parameter the query
does not set allows ``[default, ""]`` (omit it or send its default).

Knobs (:class:`SynthConfig`; a profile is a preset, keyword overrides are validated):
  profile                  "bfcl_like" (default) or "tiny" (preset below)
  seed                     shifts every draw; 0 by default
  categories               which of the four categories, in round-robin order
  n_params                 (min, max) parameters per doc; the first is always required
  p_optional               chance a further parameter is optional (has a default)
  p_mention_optional       chance the query sets an optional parameter
  n_functions              (min, max) docs in multiple / parallel_multiple entries
  n_calls                  (min, max) calls in parallel / parallel_multiple entries
  p_dotted                 chance a doc name gets a namespace (``travel.book_flight``)
  p_long_description       chance a doc description gets 1-3 extra sentences
  p_synonym                chance the query names a parameter by a synonym instead of its name,
                           so the name appears only in the schema
  p_shared_word_distractor chance a distractor shares the verb or noun of a called doc
  kinds                    parameter kinds allowed: str_place, str_person, str_code, int, float,
                           bool, enum, array_str, array_int, object (nested)
  short_values             one- or two-token values (codes like ``K7``) instead of longer ones
  terse                    no "Default is ..." sentence in parameter descriptions
  group                    K in [1, 64]: K consecutive entries share one tools block (above)
Preset "tiny" (a small model trained on the train split): 1-2 params, 2 docs, 2-3 calls, no
namespaces, no long descriptions, always synonyms, distractors always share a word, short
values, terse descriptions. Rendered with models/tiny-random-qwen3's tokenizer and chat template
(139 tokens of template alone) prompts are p10/median/p90 ~210/305/405 tokens over 400 train
entries; simple and parallel are shortest (median ~235-260), parallel_multiple longest.

Use: ``pask eval --data synthetic:eval:200[:tiny][:group=10]`` generates on the fly; ``pask synth
--split train --n 5000 --profile tiny --out DIR`` writes files, read back with ``--data file:DIR``
(``write_dataset(..., group=K)`` writes a grouped set; ``pask synth`` has no ``--group`` flag).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from sglang_pask.eval import synthetic_vocab as V
from sglang_pask.eval.entry import Entry, entry_from_bfcl

__all__ = [
    "SynthConfig",
    "PROFILES",
    "SPLITS",
    "CATEGORIES",
    "make_config",
    "generate_rows",
    "generate",
    "write_dataset",
]

CATEGORIES = ("synthetic_simple", "synthetic_multiple", "synthetic_parallel", "synthetic_parallel_multiple")
SPLITS = ("train", "calib", "eval")
SPLIT_OFFSET = {s: k * 10**8 for k, s in enumerate(SPLITS)}
KINDS = tuple(sorted(set(V.SCHEMA_TYPE)))
GROUP_MAX = 64


@dataclass(frozen=True)
class SynthConfig:
    profile: str = "bfcl_like"
    seed: int = 0
    categories: tuple = CATEGORIES
    n_params: tuple = (2, 5)
    p_optional: float = 0.4
    p_mention_optional: float = 0.5
    n_functions: tuple = (2, 4)
    n_calls: tuple = (2, 4)
    p_dotted: float = 0.3
    p_long_description: float = 0.5
    p_synonym: float = 0.5
    p_shared_word_distractor: float = 0.5
    kinds: tuple = KINDS
    short_values: bool = False
    terse: bool = False
    group: int = 1

    def __post_init__(self):
        for k in (
            "p_optional",
            "p_mention_optional",
            "p_dotted",
            "p_long_description",
            "p_synonym",
            "p_shared_word_distractor",
        ):
            if not 0.0 <= getattr(self, k) <= 1.0:
                raise ValueError(f"{k}={getattr(self, k)} must be in [0, 1]")
        for k, lo, hi in (("n_params", 1, 12), ("n_functions", 2, 24), ("n_calls", 2, 12)):
            a, b = getattr(self, k)
            if not lo <= a <= b <= hi:
                raise ValueError(f"{k}={(a, b)} must satisfy {lo} <= min <= max <= {hi}")
        if not (isinstance(self.group, int) and not isinstance(self.group, bool) and 1 <= self.group <= GROUP_MAX):
            raise ValueError(f"group={self.group!r} must be an integer in [1, {GROUP_MAX}]")
        if not self.categories or set(self.categories) - set(CATEGORIES):
            raise ValueError(f"categories must be a non-empty subset of {CATEGORIES}")
        if not self.kinds or set(self.kinds) - set(KINDS):
            raise ValueError(f"kinds must be a non-empty subset of {KINDS}")
        if not set(self.kinds) - {"bool", "enum"}:
            raise ValueError("kinds needs at least one kind besides bool/enum (parallel calls must differ)")
        if self.n_params[1] > len([p for p in V.PARAMS if p[1] in self.kinds]):
            raise ValueError("n_params max exceeds the parameter templates available for these kinds")


PROFILES = {
    "bfcl_like": SynthConfig(),
    "tiny": SynthConfig(
        profile="tiny",
        n_params=(1, 2),
        n_functions=(2, 2),
        n_calls=(2, 3),
        p_dotted=0.0,
        p_long_description=0.0,
        p_synonym=1.0,
        p_shared_word_distractor=1.0,
        short_values=True,
        terse=True,
    ),
}


def make_config(profile: str = "bfcl_like", **overrides) -> SynthConfig:
    """The profile's preset with keyword overrides (unknown keys are rejected)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {sorted(PROFILES)}")
    known = {f.name for f in dataclasses.fields(SynthConfig)}
    bad = set(overrides) - known
    if bad:
        raise ValueError(f"unknown synthetic knobs {sorted(bad)}; known: {sorted(known)}")
    return dataclasses.replace(PROFILES[profile], **overrides)


# ---- values -----------------------------------------------------------------------------------


def _value(rng: random.Random, kind: str, extra, short: bool):
    if kind == "str_place":
        return rng.choice(V.PLACES[:10] if short else V.PLACES)
    if kind == "str_person":
        return rng.choice(V.PERSONS[:10] if short else V.PERSONS)
    if kind == "str_code":
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
        if short:
            return rng.choice(letters) + str(rng.randint(1, 9))
        return "".join(rng.choice(letters) for _ in range(2)) + str(rng.randint(10, 9999))
    if kind == "int":
        return rng.randint(*extra)
    if kind == "float":
        v = round(rng.uniform(*extra), 1 if short else 2)
        return v if v != int(v) else v + 0.5
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "enum":
        return rng.choice(extra)
    if kind == "array_str":
        return rng.sample(V.WORDS, rng.randint(2, 3))
    if kind == "array_int":
        return rng.sample(range(extra[0], extra[1] + 1), rng.randint(2, 3))
    if kind == "object":
        return {k: _value(rng, sub, (1, 99), short) for k, sub in extra}
    raise AssertionError(kind)


def _say(v) -> str:
    if isinstance(v, list):
        s = [str(x) for x in v]
        return ", ".join(s[:-1]) + " and " + s[-1]
    return str(v)


def _phrase(rng: random.Random, tpl: tuple, value, cfg: SynthConfig) -> str:
    name, kind, syns, _desc, extra = tpl
    if kind == "bool":
        return extra[0] if value else extra[1]
    word = rng.choice(syns) if rng.random() < cfg.p_synonym else name.replace("_", " ")
    if kind == "object":
        return word + " " + " and ".join(f"{k} {_say(v)}" for k, v in value.items())
    return f"{word} {_say(value)}"


# ---- docs -------------------------------------------------------------------------------------


def _schema(tpl: tuple, default=None, with_default: bool = False, terse: bool = False) -> dict:
    name, kind, _syns, desc, extra = tpl
    s: dict = {"type": V.SCHEMA_TYPE[kind], "description": desc}
    if kind == "enum":
        s["enum"] = list(extra)
    elif kind == "array_str":
        s["items"] = {"type": "string"}
    elif kind == "array_int":
        s["items"] = {"type": "integer"}
    elif kind == "object":
        s["properties"] = {k: {"type": V.SCHEMA_TYPE[sub], "description": f"The {k}."} for k, sub in extra}
        s["required"] = [k for k, _ in extra]
    if with_default:
        if not terse:
            s["description"] += f" Default is {json.dumps(default)}."
        s["default"] = default
    return s


def _make_doc(rng: random.Random, verb: str, noun: str, cfg: SynthConfig) -> dict:
    """A BFCL doc plus private fields ``_tpls`` (name -> template), ``_opt`` (name -> default)."""
    pool = [p for p in V.PARAMS if p[1] in cfg.kinds]
    first = rng.choice([p for p in pool if p[1] not in ("bool", "enum")])
    rest = rng.sample([p for p in pool if p is not first], rng.randint(*cfg.n_params) - 1)
    name = f"{verb}_{noun}"
    if rng.random() < cfg.p_dotted:
        name = f"{rng.choice(V.NAMESPACES)}.{name}"
    desc = f"{verb.capitalize()} {'an' if noun[0] in 'aeiou' else 'a'} {noun} record."
    if rng.random() < cfg.p_long_description:
        desc += " " + " ".join(rng.sample(V.FILLER, rng.randint(1, 3)))
    props, required, opt = {}, [], {}
    for k, tpl in enumerate([first] + rest):
        if k > 0 and rng.random() < cfg.p_optional:
            opt[tpl[0]] = _value(rng, tpl[1], tpl[4], cfg.short_values)
            props[tpl[0]] = _schema(tpl, opt[tpl[0]], True, cfg.terse)
        else:
            props[tpl[0]] = _schema(tpl)
            required.append(tpl[0])
    doc = {"name": name, "description": desc, "parameters": {"type": "dict", "properties": props, "required": required}}
    return {**doc, "_verb": verb, "_noun": noun, "_tpls": {t[0]: t for t in [first] + rest}, "_opt": opt}


def _pairs(rng: random.Random, k: int, cfg: SynthConfig) -> list[tuple[str, str]]:
    """k distinct (verb, noun) pairs; later ones share a word with an earlier one when drawn so."""
    out = [(rng.choice(V.VERBS), rng.choice(V.NOUNS))]
    while len(out) < k:
        v, n = rng.choice(out)
        if rng.random() < cfg.p_shared_word_distractor:
            cand = (v, rng.choice(V.NOUNS)) if rng.random() < 0.5 else (rng.choice(V.VERBS), n)
        else:
            cand = (rng.choice(V.VERBS), rng.choice(V.NOUNS))
        if cand not in out:
            out.append(cand)
    return out


def _public(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if not k.startswith("_")}


# ---- calls, query, entries --------------------------------------------------------------------


def _norm(v) -> str:  # only to keep parallel calls distinguishable after BFCL's string normalising
    return json.dumps(v, sort_keys=True).lower().replace(" ", "")


def _allowed(v):
    """One allowed value in possible_answer form: a dict's fields are themselves allowed-lists."""
    return {k: [x] for k, x in v.items()} if isinstance(v, dict) else v


def _call(rng: random.Random, doc: dict, cfg: SynthConfig, avoid: set) -> tuple[dict, dict, str]:
    """(args, ground_truth params, query clause) for one call; required values not in ``avoid``."""
    req = doc["parameters"]["required"]
    for _ in range(50):
        args = {p: _value(rng, doc["_tpls"][p][1], doc["_tpls"][p][4], cfg.short_values) for p in req}
        key = _norm([args[p] for p in req])
        if key not in avoid:
            break
    else:
        raise RuntimeError(f"could not draw distinct values for {doc['name']}")
    avoid.add(key)
    gt = {p: [_allowed(v)] for p, v in args.items()}
    for p, default in doc["_opt"].items():
        if rng.random() < cfg.p_mention_optional:
            args[p] = _value(rng, doc["_tpls"][p][1], doc["_tpls"][p][4], cfg.short_values)
            gt[p] = [_allowed(args[p])]
        else:
            gt[p] = [_allowed(default), ""]
    order = [p for p in doc["parameters"]["properties"] if p in args]
    rng.shuffle(order)
    clause = ", ".join(_phrase(rng, doc["_tpls"][p], args[p], cfg) for p in order)
    return args, {doc["name"]: gt}, clause


def _draw_docs(rng: random.Random, category: str, cfg: SynthConfig) -> list[dict]:
    """The docs (private fields kept) of one entry of ``category``, in drawing order."""
    if category in ("synthetic_simple", "synthetic_parallel"):
        n_docs = 1
    else:
        n_docs = rng.randint(*cfg.n_functions)
    return [_make_doc(rng, v, n, cfg) for v, n in _pairs(rng, n_docs, cfg)]


def _draw_calls(rng: random.Random, category: str, docs: list[dict], cfg: SynthConfig) -> tuple[list[dict], str]:
    """(ground_truth, query) of one entry of ``category`` calling into ``docs``: simple / multiple
    call ``docs[0]``, parallel calls it several times, parallel_multiple calls a prefix of two or
    more of ``docs`` (calls in ``docs`` order)."""
    if category == "synthetic_simple" or category == "synthetic_multiple":
        plan = [docs[0]]
    elif category == "synthetic_parallel":
        plan = [docs[0]] * rng.randint(*cfg.n_calls)
    else:
        called = docs[: rng.randint(2, min(len(docs), cfg.n_calls[1]))]
        plan = list(called)
        while len(plan) < max(rng.randint(*cfg.n_calls), len(called)):
            plan.append(rng.choice(called))
        plan.sort(key=docs.index)
    gts, sentences, avoid = [], [], {d["name"]: set() for d in docs}
    prev = None
    for doc in plan:
        _args, gt, clause = _call(rng, doc, cfg, avoid[doc["name"]])
        gts.append(gt)
        if doc is prev:
            sentences.append(f"Do the same with {clause}.")
        else:
            sentences.append(f"{doc['_verb'].capitalize()} the {doc['_noun']} with {clause}.")
        prev = doc
    return gts, " ".join(sentences)


def _draw(rng: random.Random, category: str, cfg: SynthConfig) -> tuple[list[dict], list[dict], str]:
    """(docs, ground_truth, query) for one ungrouped entry of ``category``."""
    docs = _draw_docs(rng, category, cfg)
    gts, query = _draw_calls(rng, category, docs, cfg)
    rng.shuffle(docs)  # the called doc is not always listed first
    return [_public(d) for d in docs], gts, query


def _split_of(query: str) -> str:
    return SPLITS[int(hashlib.sha256(query.encode()).hexdigest(), 16) % len(SPLITS)]


def _row(category: str, eid: str, docs: list[dict], gts: list[dict], query: str) -> tuple[str, dict, dict]:
    prompt = {"id": eid, "question": [[{"role": "user", "content": query}]], "function": docs}
    return category, prompt, {"id": eid, "ground_truth": gts}


def _entry(split: str, i: int, cfg: SynthConfig) -> tuple[str, dict, dict]:
    """Entry ``i`` of ``split`` with ``group == 1``."""
    category = cfg.categories[i % len(cfg.categories)]
    for attempt in range(1000):
        rng = random.Random(f"pask-synth/{cfg.profile}/{cfg.seed}/{SPLIT_OFFSET[split] + i}/{attempt}")
        docs, gts, query = _draw(rng, category, cfg)
        if _split_of(query) == split:
            return _row(category, f"{category}_{split}_{i}", docs, gts, query)
    raise RuntimeError(f"{split}[{i}]: no query hashed into the split")


def _block(split: str, b: int, cfg: SynthConfig) -> list[tuple[str, dict, dict]]:
    """The ``group`` entries of block ``b`` of ``split``: one category, one list of docs (drawn
    and shuffled once from the block's seed), each entry its own calls and query over them."""
    k = cfg.group
    category = cfg.categories[b % len(cfg.categories)]
    brng = random.Random(f"pask-synth/{cfg.profile}/{cfg.seed}/{SPLIT_OFFSET[split] + b}/group{k}")
    shared = _draw_docs(brng, category, cfg)
    brng.shuffle(shared)
    rows, seen = [], set()
    for i in range(b * k, (b + 1) * k):
        fallback = None
        for attempt in range(1000):
            rng = random.Random(f"pask-synth/{cfg.profile}/{cfg.seed}/{SPLIT_OFFSET[split] + i}/group{k}/{attempt}")
            # the category's plan over the shared docs in an order of this entry's own (so which
            # doc a multiple entry calls varies within the block); the listed order stays shared
            gts, query = _draw_calls(rng, category, rng.sample(shared, len(shared)), cfg)
            if _split_of(query) != split:
                continue
            if query not in seen:
                break
            fallback = fallback or (gts, query)
        else:
            if fallback is None:
                raise RuntimeError(f"{split}[{i}]: no query hashed into the split")
            gts, query = fallback  # the docs allow no new query: repeat the first in-split one
        seen.add(query)
        docs = [_public(d) for d in copy.deepcopy(shared)]  # the entry's own objects, the same JSON
        rows.append(_row(category, f"{category}_{split}_g{k}_{i}", docs, gts, query))
    return rows


def generate_rows(
    split: str, n: int, profile: str = "bfcl_like", *, start: int = 0, **knobs
) -> list[tuple[str, dict, dict]]:
    """Entries ``start .. start+n-1`` of ``split`` as ``(category, prompt_row, answer_row)`` in
    BFCL's format (entry ``i`` is the same whatever ``start`` and ``n``; with ``group`` K > 1 it
    is entry ``i % K`` of block ``i // K``, generated whole)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
    if not (0 <= n and 0 <= start and start + n <= 10**8):
        raise ValueError(f"entries {start}..{start + n - 1} out of range")
    cfg = make_config(profile, **knobs)
    if cfg.group == 1:
        return [_entry(split, i, cfg) for i in range(start, start + n)]
    k = cfg.group
    rows = [r for b in range(start // k, -(-(start + n) // k)) for r in _block(split, b, cfg)]
    return rows[start % k : start % k + n]


def generate(split: str, n: int, profile: str = "bfcl_like", *, start: int = 0, **knobs) -> list[Entry]:
    """Like :func:`generate_rows`, as harness entries."""
    return [entry_from_bfcl(p, a, c) for c, p, a in generate_rows(split, n, profile, start=start, **knobs)]


def write_dataset(out_dir: str | Path, split: str, n: int, profile: str = "bfcl_like", **knobs) -> list[Path]:
    """Write ``<category>.jsonl`` + ``possible_answer/<category>.jsonl`` + ``config.json``.

    Byte-identical for the same arguments; loadable with ``data.load_dir`` / ``--data file:DIR``.
    """
    out = Path(out_dir)
    (out / "possible_answer").mkdir(parents=True, exist_ok=True)
    cfg = make_config(profile, **knobs)
    by_cat: dict[str, list] = {c: [] for c in cfg.categories}
    for c, p, a in generate_rows(split, n, profile, **knobs):
        by_cat[c].append((p, a))
    written = []

    def dump(path: Path, objs) -> None:
        path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), encoding="utf-8")
        written.append(path)

    for c, rows in by_cat.items():
        if rows:
            dump(out / f"{c}.jsonl", [p for p, _ in rows])
            dump(out / "possible_answer" / f"{c}.jsonl", [a for _, a in rows])
    meta = {"generator": "sglang_pask.eval.synthetic", "split": split, "n": n, **dataclasses.asdict(cfg)}
    if cfg.group == 1:
        del meta["group"]  # an ungrouped set's config.json as before the knob existed
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    written.append(out / "config.json")
    return written
