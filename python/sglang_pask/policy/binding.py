"""Binding a policy to one model: its shape and a fingerprint of its architecture config.

The fingerprint is ``sha256:`` + 16 hex digits of the canonical JSON of the architecture-relevant
fields of ``config.json`` (:data:`FINGERPRINT_FIELDS`); weights, dtype and bookkeeping keys
(``transformers_version``, token ids) do not enter it, so a retrained model with the same
architecture keeps its policies, and one with another depth, width, vocabulary or RoPE does not.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from pydantic import BaseModel, ConfigDict

#: config.json keys that change what a KV slot means or how many there are.
FINGERPRINT_FIELDS = (
    "architectures", "model_type", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_size", "intermediate_size", "vocab_size",
    "tie_word_embeddings", "rope_theta", "rope_parameters", "rope_scaling", "layer_types",
    "sliding_window", "use_sliding_window",
)


class BindingError(ValueError):
    """The model's config cannot be read, or does not match a policy's binding."""


class ModelBinding(BaseModel):
    """The model a policy belongs to: shape (``num_layers`` x ``num_kv_heads`` x ``head_dim``,
    ``vocab_size``) and the config fingerprint."""

    model_config = ConfigDict(extra="forbid")

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    fingerprint: str

    def shape(self) -> str:
        return (f"layers={self.num_layers} kv_heads={self.num_kv_heads} "
                f"head_dim={self.head_dim} vocab={self.vocab_size}")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ModelBinding":
        cfg = config.get("text_config") or config  # multimodal wrappers nest the LM's config
        try:
            heads = int(cfg["num_attention_heads"])
            head_dim = cfg.get("head_dim") or int(cfg["hidden_size"]) // heads
            return cls(
                num_layers=int(cfg["num_hidden_layers"]),
                num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(head_dim),
                vocab_size=int(cfg["vocab_size"]),
                fingerprint=fingerprint(cfg),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BindingError(f"config has no usable {e} field") from None

    @classmethod
    def from_model(cls, model: str | os.PathLike) -> "ModelBinding":
        """The binding of a model directory (or a HF hub id already in the local cache)."""
        path = config_path(model)
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise BindingError(f"cannot read {path}: {e}") from None
        try:
            return cls.from_config(config)
        except BindingError as e:
            raise BindingError(f"{path}: {e}") from None


def fingerprint(config: dict[str, Any]) -> str:
    picked = {k: config.get(k) for k in FINGERPRINT_FIELDS if config.get(k) is not None}
    blob = json.dumps(picked, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


def config_path(model: str | os.PathLike) -> str:
    """``config.json`` of a local model directory, else of a hub id in the local HF cache."""
    model = os.fspath(model)
    if os.path.isdir(model):
        path = os.path.join(model, "config.json")
        if not os.path.isfile(path):
            raise BindingError(f"model directory {model!r} has no config.json")
        return path
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a repo id, or huggingface_hub missing: same answer
        found = None
    if isinstance(found, str) and os.path.isfile(found):
        return found
    raise BindingError(f"model {model!r} is neither a local directory nor in the local HF cache")
