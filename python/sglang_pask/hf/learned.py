"""The learned scorer in the reference runner (:class:`~sglang_pask.methods.kvzap.KVzap`;
:mod:`sglang_pask.methods.learned`).

The scorer reads each layer's attention input: the output of its ``input_layernorm``. Forward hooks
on those modules capture it during the forwards the runner runs anyway (the prefill, each decode
step): no extra forward. A ``learned_heads`` cache keeps the captured rows by logical position
(:attr:`~.cache.PrunableCache.layer_inputs`), and at a compression the scorer maps the rows of
the positions each layer holds to predicted KVzip scores (:func:`learned_heads`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

import numpy as np
import torch

from sglang_pask.methods.learned import LearnedScorer, bind_scorer


def decoder_layers(model) -> list:
    """The model's decoder layers (``model.model.layers``: Llama, Qwen2, Qwen3)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not all(hasattr(lay, "input_layernorm") for lay in layers):
        raise ValueError(f"{type(model).__name__} has no model.layers[i].input_layernorm: "
                         "the learned scorer reads the attention input there")
    return list(layers)


@contextlib.contextmanager
def capture_layer_inputs(model) -> Iterator[list[list[torch.Tensor]]]:
    """Within the block, every forward appends each layer's attention input (float32 ``[n, hidden]``,
    batch row 0, on the CPU) to ``captured[layer]``; the hooks are removed on exit."""
    captured: list[list[torch.Tensor]] = [[] for _ in decoder_layers(model)]

    def hook(layer):
        def fn(_module, _args, output):
            captured[layer].append(output[0].detach().float().cpu())
        return fn

    handles = [lay.input_layernorm.register_forward_hook(hook(i)) for i, lay in enumerate(decoder_layers(model))]
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def record_inputs(cache, captured: list[list[torch.Tensor]], start: int) -> None:
    """Store one forward's captured rows (positions ``start ..``) in ``cache.layer_inputs``."""
    if not cache.layer_inputs:
        cache.layer_inputs = [torch.empty(0, rows[0].shape[-1]) for rows in captured]
    for li, rows in enumerate(captured):
        if len(rows) != 1:
            raise RuntimeError(f"layer {li}: input_layernorm ran {len(rows)} times in one forward")
        cache.layer_inputs[li] = torch.cat([cache.layer_inputs[li][:start], rows[0]])


def learned_heads(scorer: LearnedScorer, cache, retained: list[np.ndarray]) -> list[np.ndarray]:
    """Per layer, float ``[Hkv, n_l]`` aligned with ``retained[l]``: the scorer's predicted KVzip
    scores of the positions the layer holds (0 where a head no longer holds one)."""
    out = []
    for li, pos in enumerate(retained):
        rows = cache.layer_inputs[li] if cache.layer_inputs else None
        if rows is None or (len(pos) and int(pos[-1]) >= rows.shape[0]):
            raise RuntimeError(f"layer {li}: the cache holds no attention input for some positions")
        s = scorer.scores(li, rows[torch.as_tensor(pos, dtype=torch.long)].numpy())
        mask = cache.head_mask(li)
        out.append(s if mask is None else s * mask.cpu().numpy())
    return out


def resolve_scorer(method, model, model_dir: Optional[str]) -> tuple[LearnedScorer, object]:
    """The scorer ``method`` (a ``learned_heads`` method) reads, checked against ``model`` (its
    folder ``model_dir``, else its config), and the method with ``scorer_sha256`` filled in (what
    the run records). There is no default file: a scorer is bound to one model, so the run names
    it (a ``*.safetensors`` file in the model's folder would be read as weights by SGLang's loader,
    so shipped scorers live in ``policies/``)."""
    from sglang_pask.policy.binding import ModelBinding

    if not model_dir:  # a loaded model remembers the folder it came from
        known = getattr(model, "name_or_path", "") or ""
        model_dir = known if os.path.isfile(os.path.join(known, "config.json")) else None
    if model_dir:
        have, name = ModelBinding.from_model(model_dir), model_dir
    else:
        have, name = ModelBinding.from_config(model.config.to_dict()), getattr(model, "name_or_path", "") or \
            type(model).__name__
    return bind_scorer(method, have, name)
