"""Test helpers for the reference runner: an independent full-recompute reference and tiny models.

The reference recomputes the whole sequence in one plain forward (a ``DynamicCache``, no pruning)
with an explicit boolean mask per layer: query ``t`` sees key ``s`` iff ``s <= t`` and layer ``li``
had not dropped ``s`` at a compression point with ``seq_len <= t`` (per KV head when a compression
selected per head: ``[kv_heads, T, T]``, expanded to the query heads of each group). Its logits
must equal the pruned incremental runner's; its cached keys at the kept positions must equal the
runner's slots.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache

from sglang_pask.methods.base import KVMethod, Selection

REF_NAME = "pask_reference"


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    allow = kw["reference_masks"][module.layer_idx]  # [T, T] or [Hkv, T, T] bool
    if allow.dim() == 3:
        allow = allow.repeat_interleave(query.shape[1] // key.shape[1], dim=0)[None]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=allow, scale=scaling,
                                         enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


@contextmanager
def attention_impl(model, name: str):
    old = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield model
    finally:
        model.config._attn_implementation = old


def reference_masks(result, num_layers: int, num_kv_heads: int = 1) -> list[torch.Tensor]:
    """Per layer ``[T, T]`` bool visibility over the fed sequence (prompt + forwarded outputs);
    ``[num_kv_heads, T, T]`` when some compression selected per KV head (``head_mask``)."""
    T = len(result.prompt_ids) + _forwarded(result)
    per_head = any(c.head_mask is not None for c in result.compressions)
    H = num_kv_heads if per_head else 1
    dropped_at = np.full((num_layers, H, T), np.iinfo(np.int64).max, dtype=np.int64)
    for c in result.compressions:
        for li, d in enumerate(c.dropped):
            dropped_at[li, :, d] = np.minimum(dropped_at[li, :, d], c.seq_len)
            if c.head_mask is not None:  # a head also loses what it alone did not keep
                for h in range(H):
                    gone = c.kept[li][~c.head_mask[li][h]]
                    dropped_at[li, h, gone] = np.minimum(dropped_at[li, h, gone], c.seq_len)
    t = np.arange(T)[:, None]
    s = np.arange(T)[None, :]
    masks = [torch.from_numpy((s <= t)[None] & (dropped_at[li][:, None, :] > t[None])) for li in range(num_layers)]
    return masks if per_head else [m[0] for m in masks]


def _forwarded(result) -> int:
    """Generated tokens that went through the model (all but a final stop / length token)."""
    return max(len(result.token_ids) - 1, 0)


@torch.inference_mode()
def reference_forward(model, result):
    """(logits ``[T, vocab]`` float32, DynamicCache) of the masked full recompute of ``result``."""
    ids = list(result.prompt_ids) + list(result.token_ids[:_forwarded(result)])
    masks = reference_masks(result, model.config.num_hidden_layers, model.config.num_key_value_heads)
    AttentionInterface.register(REF_NAME, _reference_attention)
    cache = DynamicCache()
    with attention_impl(model, REF_NAME):
        out = model(input_ids=torch.tensor([ids]), position_ids=torch.arange(len(ids))[None],
                    cache=cache, use_cache=True, reference_masks=masks)
    return out.logits[0].float(), cache


def runner_logit_rows(result) -> list[int]:
    """Sequence rows whose logits the runner recorded, in order (row P-1 predicts output 0)."""
    P = len(result.prompt_ids)
    return list(range(P - 1, P - 1 + len(result.logits)))


def tiny_qwen3(vocab_size: int, layers: int = 4, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
               head_dim: int = 16, seed: int = 0, dtype=torch.float32, **extra):
    """A random in-memory Qwen3ForCausalLM (eval mode) for CPU tests."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=head_dim,
                      max_position_embeddings=extra.pop("max_position_embeddings", 8192),
                      tie_word_embeddings=True, **extra)
    return Qwen3ForCausalLM(cfg).to(dtype).eval()


def random_prompt(tokenizer_dir, prompt_len: int, seed: int):
    """(tokenizer from ``tokenizer_dir``, a 2-layer random Qwen3 of 4 query / 2 KV heads seeded
    ``seed``, ``prompt_len`` random token ids): the inputs of the engine-statistics tests."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = tiny_qwen3(4096, layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, seed=seed)
    ids = torch.randint(0, 4096, (prompt_len,), generator=torch.Generator().manual_seed(seed)).tolist()
    return tok, model, ids


# ---- test-only KV methods (uneven per-layer allocations; a statistics consumer) -------------


@dataclass(frozen=True)
class KeepAllMethod(KVMethod):
    """Keeps every retained position (Full KV)."""

    name = "test_keep_all"

    def allocation(self, view):
        return np.array([len(r) for r in view.retained], dtype=np.int64)

    def select(self, view):
        return Selection([np.asarray(r, np.int64).copy() for r in view.retained])


@dataclass(frozen=True)
class SinksRecentMethod(KVMethod):
    """Sinks + most recent, with a per-layer allocation that differs between layers (layer ``li``
    gets ``li`` fewer slots than an even split) so multi-length layers are exercised."""

    name = "test_sinks_recent"

    sinks: int = 4

    def allocation(self, view):
        per = view.budget_slots(self.budget) // view.num_layers
        return np.array([max(min(len(r), per - li), view.protected_tail)
                         for li, r in enumerate(view.retained)], dtype=np.int64)

    def select(self, view):
        kept = []
        for r, a in zip(view.retained, self.allocation(view)):
            s = min(self.sinks, a - view.protected_tail)
            kept.append(np.concatenate([r[:s], r[len(r) - (a - s):]]).astype(np.int64))
        return Selection(kept)


@dataclass(frozen=True)
class TopAccumulatedMethod(SinksRecentMethod):
    """H2O-like: the tail plus the highest accumulated attention (exercises the statistics path)."""

    name = "test_top_accumulated"
    needs_attention = "accumulated"

    def select(self, view):
        kept = []
        for r, a, acc in zip(view.retained, self.allocation(view), view.attention.accumulated):
            tail = r >= view.seq_len - view.protected_tail
            score = np.where(tail, np.inf, acc)
            order = np.lexsort((-r, -score))[:a]  # by score, ties: newest first
            kept.append(np.sort(r[order]).astype(np.int64))
        return Selection(kept)


TEST_METHODS = {m.name: m for m in (KeepAllMethod, SinksRecentMethod, TopAccumulatedMethod)}


def registry():
    """``(make_method, sorted names)`` of the methods registry."""
    from sglang_pask.methods import METHODS, make_method

    return make_method, sorted(METHODS)


def build_method(name: str, budget: float, policy=None, model=None, **opts) -> KVMethod:
    """A test-only method (:data:`TEST_METHODS`) or a registered one; ``kvzap`` (and ``pask`` whose
    residual reads the ``learned`` statistic) given ``model`` reads a random scorer for it
    (:func:`random_scorer`) unless ``opts`` name one."""
    if name in TEST_METHODS:
        return TEST_METHODS[name](budget, **opts)
    learned = name == "kvzap" or (name == "pask" and opts.get("attention_stat") == "learned")
    if learned and model is not None and "scorer" not in opts:
        opts["scorer"] = random_scorer(model)
    return registry()[0](name, budget, policy=policy, **opts)


_SCORERS: dict = {}


def random_scorer(model, seed: int = 0) -> str:
    """A scorer file with random weights bound to ``model`` (its config's binding), written once per
    (model, seed) into a temporary folder; returns its path."""
    import os
    import tempfile

    from sglang_pask.methods.learned import LearnedScorer
    from sglang_pask.policy.binding import ModelBinding

    key = (id(model), seed)
    if key not in _SCORERS or not os.path.isfile(_SCORERS[key]):
        cfg = model.config
        rng = np.random.default_rng(seed)
        L, D, H = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads
        scorer = LearnedScorer(rng.normal(0, 1 / np.sqrt(D), (L, D, H)), rng.normal(-4, 1, (L, H)),
                               ModelBinding.from_config(cfg.to_dict()), {"model_path": "random (test)"})
        path = os.path.join(tempfile.mkdtemp(prefix="pask-scorer-"), "random.safetensors")
        scorer.save(path)
        _SCORERS[key] = path
    return _SCORERS[key]
