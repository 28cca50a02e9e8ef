"""Fitting the learned scorer (:mod:`sglang_pask.methods.learned`) and measuring how well it ranks
(``pask fit-scorer``, ``pask scorer-report``).

Data: each prompt is rendered as the harness renders it (``build_request`` -> ``runner_body`` ->
``Runner.forward_request``, ``tool_choice`` required) and written once into a KVzip cache; hooks on
``input_layernorm`` capture each layer's attention input during that prefill, and KVzip's scores
of the prompt (``hf/kvzip.py`` ``kvzip_heads``, default ``chunk_size``) are the targets. The first
``n_sink`` positions are left out of fitting and of every metric. Only ``train`` and ``calib``
splits are accepted: the eval split is never read.

Fit: per layer, :func:`~sglang_pask.methods.learned.fit_layer` (ridge, the penalty chosen on
``val_n`` held-out prompts of the same split drawn by ``seed``, then refitted on all of them).

Quality, per layer and KV head, averaged over prompts: Spearman's rank correlation of predicted
and true KVzip scores; recall@k of the kept sets, |top-k(predicted) ∩ top-k(KVzip)| / k with k =
a fraction (0.33, 0.2) of the prompt's non-sink positions (both sets have size k, so recall =
precision); and the pooled overlap, every (layer, head, position) of a prompt ranked together (as
KVzip's global allocation ranks them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

FRACTIONS = (0.33, 0.2)
SPLITS = ("train", "calib")


def check_split(spec: str) -> dict:
    """The parsed ``--data`` spec; ValueError unless it names a train or calib split."""
    from sglang_pask.eval.data import parse_spec

    d = parse_spec(spec)
    if d.get("split") not in SPLITS:
        raise ValueError(f"data {spec!r} is not a train or calib split (got {d.get('split')!r}): the scorer "
                         "is fitted and measured on train/calib prompts only, never on eval")
    return d


@dataclass
class Sample:
    """One prompt: per layer its attention inputs ``x[l]`` float32 ``[T, D]`` and KVzip's scores
    ``kvzip[l]`` float32 ``[H, T]``."""

    id: str
    x: list[np.ndarray]
    kvzip: list[np.ndarray]


def take(n: Optional[int] = None, skip: int = 0) -> Optional[dict]:
    """Which entries of ``spec`` a scorer file or a report read, as stored: None for every entry."""
    return None if n is None else {"n": n, "skip": skip, "order": "round-robin over categories"}


def described(data: dict) -> Optional[str]:
    """A scorer header's ``data`` block in one line: its spec, and the sample when it took one."""
    t = data.get("sample")
    return data.get("spec") if not t else f"{data.get('spec')} --n {t['n']} --skip {t['skip']}"


def entries_of(spec: str, n: Optional[int] = None, skip: int = 0) -> list:
    """The entries of ``spec`` (a train or calib split); with ``n``, ``n`` of them after the first
    ``skip`` taken round-robin over its categories (:func:`~sglang_pask.eval.data.stratified`: a
    large split such as BFCL's calib gives a sample of every category, and two disjoint samples
    for fitting and measuring)."""
    from sglang_pask.eval.data import load_spec, stratified

    check_split(spec)
    entries = load_spec(spec)
    if n is None:
        return entries
    if n < 1 or skip < 0 or skip + n > len(entries):
        raise ValueError(f"{spec!r} has {len(entries)} entries: cannot take {n} after the first {skip}")
    return stratified(entries, skip + n)[skip:]


def collect(model_dir: str, entries: Sequence, n_sink: int = 4,
            progress: Optional[Callable[[int, int], None]] = None) -> list[Sample]:
    """The samples of ``entries`` (:func:`entries_of`; module docstring)."""
    import torch

    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.hf.kvzip import kvzip_heads
    from sglang_pask.hf.learned import capture_layer_inputs
    from sglang_pask.hf.runner import Runner
    from sglang_pask.methods import make_method

    runner = Runner(model_dir, method=make_method("kvzip", 0.33, schedule="prefill", n_sink=n_sink),
                    grammar="sglang")
    settings = Settings(max_tokens=128, tool_choice="required")
    out = []
    with torch.inference_mode():
        for i, entry in enumerate(entries):
            body = runner_body(build_request(entry, settings)[0])
            with capture_layer_inputs(runner.model) as captured:
                prompted = runner.forward_request(body)
            if any(len(c) != 1 for c in captured):
                raise RuntimeError(f"{entry.id}: the prompt was not written in one forward")
            scores = kvzip_heads(runner, prompted.cache)
            out.append(Sample(entry.id, [c[0].numpy() for c in captured], [s.astype(np.float32) for s in scores]))
            if progress:
                progress(i + 1, len(entries))
    return out


def _rows(samples: Sequence[Sample], layer: int, n_sink: int) -> tuple[np.ndarray, np.ndarray]:
    from sglang_pask.methods.learned import EPS

    x = np.concatenate([s.x[layer][n_sink:] for s in samples])
    y = np.concatenate([np.log(s.kvzip[layer][:, n_sink:].T.astype(np.float64) + EPS) for s in samples])
    return x.astype(np.float64), y


def fit(samples: Sequence[Sample], binding, *, model_path: str, spec: str, seed: int = 0, val_n: int = 50,
        n_sink: int = 4, sample: Optional[dict] = None):
    """The :class:`~sglang_pask.methods.learned.LearnedScorer` fitted on ``samples`` (module docstring)."""
    from sglang_pask.methods.learned import LAMBDAS, LearnedScorer, fit_layer

    if not 0 < val_n < len(samples):
        raise ValueError(f"val_n={val_n} must be in (0, {len(samples)}) prompts")
    order = np.random.default_rng(seed).permutation(len(samples))
    val_idx = set(order[:val_n].tolist())
    fit_s = [s for i, s in enumerate(samples) if i not in val_idx]
    val_s = [s for i, s in enumerate(samples) if i in val_idx]
    ws, bs, metrics = [], [], []
    for layer in range(len(samples[0].x)):
        xf, yf = _rows(fit_s, layer, n_sink)
        xv, yv = _rows(val_s, layer, n_sink)
        w, b, m = fit_layer(xf, yf, xv, yv)
        ws.append(w)
        bs.append(b)
        metrics.append(m)
    rows_fit, rows_val = sum(len(s.x[0]) - n_sink for s in fit_s), sum(len(s.x[0]) - n_sink for s in val_s)
    header = {
        "model_path": model_path,
        "data": {"spec": spec, "split": check_split(spec)["split"], "seed": seed,
                 **({"sample": sample} if sample else {}),
                 "fit_ids": [s.id for s in fit_s], "val_ids": [s.id for s in val_s],
                 "rendering": "build_request -> runner_body -> Runner.forward_request, tool_choice required"},
        "targets": {"statistic": "kvzip_heads", "n_sink": n_sink, "chunk_size": 2048, "sinks_excluded": True},
        "counts": {"prompts_fit": len(fit_s), "prompts_val": len(val_s), "positions_fit": rows_fit,
                   "positions_val": rows_val},
        "fit": {"method": "ridge on standardised features + bias, penalty lambda * n * |w|^2, lambda per layer "
                          "by held-out MSE, then refitted on fit + held-out prompts",
                "lambdas": list(LAMBDAS), "layers": metrics},
    }
    return LearnedScorer(np.stack(ws), np.stack(bs), binding, header)


def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 0.. of ``a`` (1-D), ties given their average rank."""
    order = np.argsort(a, kind="stable")
    sa = a[order]
    ranks = np.empty(a.size, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, sa[1:] != sa[:-1]])
    ends = np.r_[starts[1:], a.size]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e - 1) / 2.0
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on average ranks; 0 when either side is constant)."""
    ra, rb = rankdata(np.asarray(a, np.float64)), rankdata(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = np.sqrt((ra ** 2).sum() * (rb ** 2).sum())
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def recall_at(pred: np.ndarray, true: np.ndarray, frac: float) -> float:
    """|top-k(pred) ∩ top-k(true)| / k, ``k = max(1, round(frac * n))`` (ties: the earlier position)."""
    k = max(1, int(round(frac * pred.size)))
    top_p = np.argsort(-pred, kind="stable")[:k]
    top_t = np.argsort(-true, kind="stable")[:k]
    return len(np.intersect1d(top_p, top_t)) / k


def quality(scorer, samples: Sequence[Sample], n_sink: int = 4, fractions: Sequence[float] = FRACTIONS) -> dict:
    """Per (layer, head) and pooled fit quality over ``samples`` (module docstring)."""
    from sglang_pask.methods.learned import EPS

    L, H = scorer.num_layers, scorer.kv_heads
    spear = np.zeros((len(samples), L, H))
    rec = np.zeros((len(samples), len(fractions), L, H))
    pooled = np.zeros((len(samples), len(fractions)))
    for i, s in enumerate(samples):
        preds = [scorer.predict(li, s.x[li][n_sink:]) for li in range(L)]  # [H, n] log scores
        trues = [np.log(s.kvzip[li][:, n_sink:].astype(np.float64) + EPS) for li in range(L)]
        for li in range(L):
            for h in range(H):
                spear[i, li, h] = spearman(preds[li][h], trues[li][h])
                for j, f in enumerate(fractions):
                    rec[i, j, li, h] = recall_at(preds[li][h], trues[li][h], f)
        p_all = np.concatenate([p.ravel() for p in preds])
        t_all = np.concatenate([t.ravel() for t in trues])
        for j, f in enumerate(fractions):
            pooled[i, j] = recall_at(p_all, t_all, f)
    return {
        "prompts": len(samples), "positions": int(sum(len(s.x[0]) - n_sink for s in samples)),
        "fractions": list(fractions),
        "spearman": spear.mean(0).tolist(),  # [L][H]
        "recall": {str(f): rec[:, j].mean(0).tolist() for j, f in enumerate(fractions)},  # [L][H]
        "pooled": {str(f): float(pooled[:, j].mean()) for j, f in enumerate(fractions)},
        "mean": {"spearman": float(spear.mean()),
                 **{f"recall@{f}": float(rec[:, j].mean()) for j, f in enumerate(fractions)}},
    }


def table(q: dict) -> str:
    """The per-layer, per-KV-head table (markdown) and the pooled row."""
    fr = q["fractions"]
    head = "| layer | KV head | Spearman | " + " | ".join(f"recall@{f:g}" for f in fr) + " |"
    lines = [head, "|" + "---:|" * (3 + len(fr))]
    for li, row in enumerate(q["spearman"]):
        for h, sp in enumerate(row):
            lines.append(f"| {li} | {h} | {sp:.3f} | " +
                         " | ".join(f"{q['recall'][str(f)][li][h]:.3f}" for f in fr) + " |")
    lines.append(f"| all | mean | {q['mean']['spearman']:.3f} | " +
                 " | ".join(f"{q['mean'][f'recall@{f}']:.3f}" for f in fr) + " |")
    lines.append("| all | pooled | - | " + " | ".join(f"{q['pooled'][str(f)]:.3f}" for f in fr) + " |")
    return "\n".join(lines)


def timer() -> Callable[[], float]:
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0
