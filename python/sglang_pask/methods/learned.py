"""The learned scorer (kvpress KVzap, arXiv 2601.07891; DESIGN.md §5 "The residual scorer, compiled
too"): per layer, a linear map from the attention input's hidden state at a position (the output
of the layer's ``input_layernorm``) to one predicted log KVzip score per KV head.

The targets are this project's KVzip scores (:attr:`~.base.AttentionStats.kvzip_heads`, the
most attention any reconstruction query of a KV group pays a slot; :class:`~.kvzip.KVzip`), as
``log(score + EPS)``. They are KVzip's scores, not KVzip+ as kvpress defines it (kvpress's KVzap
regresses on KVzip+, which normalises each score by the value norms and the hidden state): the
project offers plain KVzip only, and the scorer stands in for exactly the statistic KVzip and PASK
read here, so a predicted score is on the same scale as the one it replaces. The first ``n_sink``
positions are left out of fitting (every method keeps them anyway).

The scorer is a sidecar file read as data only (safetensors: two float32 tensors and a JSON
header, no code), bound to one model by :class:`~sglang_pask.policy.binding.ModelBinding` (the
binding and fingerprint policies use); :func:`scorer_sha256` is what a policy pins it by.

Shapes: ``weight`` float32 ``[L, D, H]`` and ``bias`` float32 ``[L, H]`` (``D`` the hidden size,
``H`` the KV heads), already folded with the standardisation the fit used, so a layer's predicted
log scores for hidden states ``x`` ``[n, D]`` are ``x @ weight[l] + bias[l]`` (``[n, H]``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from sglang_pask.policy.binding import ModelBinding

FORMAT = "pask-learned-scorer/1"
#: added to a KVzip score before the log (a score of 0 maps to log(EPS))
EPS = 1e-6
TARGET = ("log(kvzip_heads + 1e-6): this project's KVzip scores (kvpress KVzipPress at 8bb29b9, "
          "max attention over a KV group's reconstruction queries; not KVzip+), per KV head")
FEATURE = "the layer's input_layernorm output (the attention input's hidden state), per position"
_KEY = "pask_scorer"  # the safetensors metadata key holding the JSON header


class ScorerError(ValueError):
    """A scorer file that cannot be read, is malformed, or belongs to another model."""


def scorer_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of the scorer file's bytes (what a run records and a policy pins)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise ScorerError(f"cannot read scorer file {os.fspath(path)!r}: {e}") from None
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class LearnedScorer:
    """One linear map per layer (module docstring). ``model``: the binding it was fitted for;
    ``header``: everything else the file records (targets, data spec and split, counts, fit
    metrics); the file's own keys (format, model, shapes) are set by :meth:`save`."""

    weight: np.ndarray  # float32 [L, D, H]
    bias: np.ndarray  # float32 [L, H]
    model: ModelBinding
    header: dict = field(default_factory=dict)

    def __post_init__(self):
        w = np.ascontiguousarray(self.weight, dtype=np.float32)
        b = np.ascontiguousarray(self.bias, dtype=np.float32)
        if w.ndim != 3 or b.shape != (w.shape[0], w.shape[2]):
            raise ScorerError(f"scorer weight must be [L, D, H] and bias [L, H], got {w.shape} and {b.shape}")
        if (w.shape[0], w.shape[2]) != (self.model.num_layers, self.model.num_kv_heads):
            raise ScorerError(f"scorer has {w.shape[0]} layers x {w.shape[2]} KV heads, its model "
                              f"{self.model.shape()}")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise ScorerError("scorer weights hold non-finite values")
        object.__setattr__(self, "weight", w)
        object.__setattr__(self, "bias", b)

    @property
    def num_layers(self) -> int:
        return int(self.weight.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[1])

    @property
    def kv_heads(self) -> int:
        return int(self.weight.shape[2])

    def _predict64(self, layer: int, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.hidden_size:
            raise ScorerError(f"layer {layer}: hidden states must be [n, {self.hidden_size}], got {x.shape}")
        # einsum without optimize runs numpy's own loops, not BLAS: row-stable by construction and
        # single-threaded. BLAS (OpenBLAS) would start its thread pool, whose threads spin after each
        # call and, inside a server on few cores, take the CPU from torch's own threads: every torch
        # op of the forward around the scorer ran ~1.7x slower on 2 cores.
        return np.einsum("nd,dh->nh", x.astype(np.float64), self.weight[layer].astype(np.float64),
                         optimize=False) + self.bias[layer]  # [n, H]

    def predict(self, layer: int, x) -> np.ndarray:
        """float32 ``[H, n]``: predicted log KVzip scores for hidden states ``x`` ``[n, D]``.

        Row-stable: a row's prediction does not depend on the other rows given with it (summed in
        float64, rounded once to float32), so an engine that scores each forward's rows (the
        server) gets the values of one that scores the held rows at a compression (the runner),
        and equal hidden states -- a repeated token at layer 0 -- score exactly equal (a float32
        matrix product's summation order depends on the matrix's shape and a row's place in it)."""
        return self._predict64(layer, x).astype(np.float32).T

    def scores(self, layer: int, x) -> np.ndarray:
        """float32 ``[H, n]``: predicted KVzip scores (``exp`` of :meth:`predict`, in float64 and
        rounded once; >= 0, the units of ``kvzip_heads``). Row-stable as :meth:`predict`."""
        return np.exp(np.minimum(self._predict64(layer, x), 80.0)).astype(np.float32).T

    def check_model(self, have: ModelBinding, model: str, what: str = "scorer") -> None:
        """Raise :class:`ScorerError`, naming both models, unless ``have`` is this scorer's model."""
        want = self.model
        if want.shape() != have.shape() or want.fingerprint != have.fingerprint:
            fitted = self.header.get("model_path") or "(unnamed)"
            raise ScorerError(f"{what} was fitted for model {fitted!r} ({want.fingerprint}, {want.shape()}), "
                              f"but model {model!r} is {have.fingerprint} ({have.shape()})")

    def document(self) -> dict:
        """The JSON header :meth:`save` writes."""
        return {**self.header, "format": FORMAT, "model": self.model.model_dump(), "layers": self.num_layers,
                "kv_heads": self.kv_heads, "hidden_size": self.hidden_size, "kind": "linear",
                "eps": EPS, "target": TARGET, "feature": FEATURE}

    def save(self, path: str | os.PathLike) -> str:
        """Write the file (deterministic bytes for equal contents); returns its sha256."""
        from safetensors.numpy import save_file

        header = json.dumps(self.document(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        save_file({"weight": self.weight, "bias": self.bias}, os.fspath(path), metadata={_KEY: header})
        return scorer_sha256(path)

    @classmethod
    def load(cls, path: str | os.PathLike, model: Optional[ModelBinding] = None,
             model_name: str = "") -> "LearnedScorer":
        """Read a scorer file as data; with ``model`` (its binding, named ``model_name`` in
        errors), refuse a scorer fitted for another model."""
        from safetensors import SafetensorError, safe_open

        path = os.fspath(path)
        try:
            with safe_open(path, framework="np") as f:
                meta = f.metadata() or {}
                arrays = {k: f.get_tensor(k) for k in f.keys()}
        except (OSError, SafetensorError) as e:
            raise ScorerError(f"cannot read scorer file {path!r}: {e}") from None
        try:
            header = json.loads(meta[_KEY])
            if header.get("format") != FORMAT:
                raise ScorerError(f"scorer file {path!r} has format {header.get('format')!r}, expected {FORMAT}")
            binding = ModelBinding.model_validate(header["model"])
            scorer = cls(arrays["weight"], arrays["bias"], binding, header)
        except (KeyError, ValueError, TypeError) as e:
            if isinstance(e, ScorerError):
                raise
            raise ScorerError(f"scorer file {path!r} is malformed: {e}") from None
        if model is not None:
            scorer.check_model(model, model_name, what=f"scorer file {path!r}")
        return scorer


def bind_scorer(method, have: ModelBinding, model_name: str, option: str = "the method option scorer=FILE"):
    """The scorer ``method`` (a ``learned_heads`` method: fields ``scorer``, ``scorer_sha256``)
    reads, checked against the served model ``have`` (named ``model_name`` in errors), and the
    method with ``scorer_sha256`` filled in (what every run records). ``option``: how the user
    names the file (the runner's method option, the server's flag), for the error when none is
    given. Raises :class:`ScorerError` (one line). There is no default file: a scorer is bound
    to one model."""
    import dataclasses

    path = method.scorer
    if not path:
        raise ScorerError(f"{method.name} needs a scorer file: pass {option} "
                          "(e.g. policies/pask-tiny-fc.kvzap.safetensors; `pask fit-scorer` writes one)")
    if not os.path.isfile(path):
        raise ScorerError(f"{method.name}: no scorer file {path!r} (fit one with `pask fit-scorer`)")
    scorer = LearnedScorer.load(path, have, model_name)
    sha = scorer_sha256(path)
    if method.scorer_sha256 and method.scorer_sha256 != sha:
        raise ScorerError(f"scorer file {path!r} has sha256 {sha}, the method pins {method.scorer_sha256}")
    return scorer, dataclasses.replace(method, scorer_sha256=sha)


def ridge(x: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Ridge regression of ``y`` ``[n, H]`` on standardised ``x`` ``[n, D]`` plus a bias, penalty
    ``lam * n * |w|^2`` on the standardised weights (the bias is not penalised). Returns the
    weights folded back to raw features (``x @ w + b`` predicts ``y``; ``w`` ``[D, H]``, ``b``
    ``[H]``) and the standardisation (``mean``, ``scale``)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # a constant feature: no weight, no division by 0
    xs = (x - mean) / scale
    ym = y.mean(0)
    gram = xs.T @ xs + lam * x.shape[0] * np.eye(x.shape[1])
    ws = np.linalg.solve(gram, xs.T @ (y - ym))
    w = ws / scale[:, None]
    return w, ym - mean @ w, {"mean": mean, "scale": scale}


def r2(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """float ``[H]``: coefficient of determination per output column."""
    ss_res = ((y - pred) ** 2).sum(0)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    return 1.0 - ss_res / np.maximum(ss_tot, 1e-300)


#: the ridge penalties tried per layer (chosen by held-out mean squared error)
LAMBDAS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def fit_layer(x_fit, y_fit, x_val, y_val, lambdas=LAMBDAS) -> tuple[np.ndarray, np.ndarray, dict]:
    """One layer: the penalty with the lowest held-out MSE (ties: the larger penalty), then the fit
    on fit + held-out rows at that penalty. Returns (``w`` ``[D, H]``, ``b`` ``[H]``, metrics)."""
    val = []
    for lam in lambdas:
        w, b, _ = ridge(x_fit, y_fit, lam)
        val.append(float(((x_val @ w + b - y_val) ** 2).mean()))
    best = min(range(len(lambdas)), key=lambda i: (val[i], -lambdas[i]))
    w, b, _ = ridge(x_fit, y_fit, lambdas[best])
    val_r2 = r2(y_val, x_val @ w + b)
    x_all, y_all = np.concatenate([x_fit, x_val]), np.concatenate([y_fit, y_val])
    w, b, _ = ridge(x_all, y_all, lambdas[best])
    return w, b, {"lambda": lambdas[best], "val_mse_by_lambda": dict(zip(map(str, lambdas), val)),
                  "val_r2": [float(v) for v in val_r2],
                  "train_r2": [float(v) for v in r2(y_all, x_all @ w + b)]}


def check_scorer_option(method) -> None:
    """The ``scorer`` / ``scorer_sha256`` options a method that reads a scorer file carries
    (:class:`~.kvzap.KVzap`, :class:`~.pask.Pask` with the ``learned`` statistic): a path, and an
    empty pin or 64 lowercase hex digits (raises the method's one-line ValueError)."""
    method._check("scorer", isinstance(method.scorer, str), "must be a file path (a string)")
    method._check("scorer_sha256", isinstance(method.scorer_sha256, str) and
                  re.fullmatch(r"([0-9a-f]{64})?", method.scorer_sha256) is not None,
                  "must be empty or 64 lowercase hex digits")
