"""The learned scorer in the server (KVzap: :class:`~sglang_pask.methods.kvzap.KVzap`, the
``learned_heads`` statistics), as the reference runner computes it (``hf/learned.py``).

The scorer reads each layer's attention input, the output of its ``input_layernorm``. Forward hooks
on those modules of the served model (installed once, after the model runner built its attention
backends: :func:`after_init_backends`) capture it inside the forwards the scheduler runs anyway --
prefill/extend, every chunk of a chunked prefill, and decode when the method compresses after
prefill end: no extra forward. Each captured row goes straight through the scorer's own
:meth:`~sglang_pask.methods.learned.LearnedScorer.scores` and is stored by the token's full id
(``forward_batch.out_cache_loc``, which the model runner's ``forward`` hands over for the length of
the forward: :func:`around_forward`). At a compression :mod:`..managers.persist` reads the scores of each
layer's held positions (:meth:`LearnedScores.heads`), aligned as the runner's ``learned_heads``.

State: one :class:`LearnedScores` per scheduler, owned by its KV pool
(:attr:`~..mem_cache.pools.PaskKVPool.learned_scores`: the scores live in the pool's full-id space, as its
``mapping``). ``scores``: float32 ``[L, full_size + 2, kv_heads]`` (the pool's full ids, sentinel
column included), a slot's row written by the forward that writes its KV; a full id freed and
reused is overwritten by its next writer. Under the ``prefill`` schedule only prompt positions
are ever read (the one compression is at prefill end), so decode forwards are not scored.

Invariants: every layer's hook fires once per captured forward, over exactly the forward's tokens
(``[n, D]`` with ``n = len(out_cache_loc)``); a forward where that fails leaves its tokens' scores
NaN (counted as ``missed``) and a compression that would read them raises, so the request keeps
Full KV and the error is counted (never a silent stale score).
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import numpy as np
import torch

from sglang_pask.hf.learned import decoder_layers
from sglang_pask.methods.learned import LearnedScorer

logger = logging.getLogger("sglang_pask")


class LearnedScores:
    """The learned scorer's predictions per full id (module docstring). ``full_ids``: the pool's
    full-id columns (``full_size + 2``); ``decode``: whether decode forwards are scored too."""

    def __init__(self, scorer: LearnedScorer, full_ids: int, decode: bool = True):
        self.scorer = scorer
        self.decode = bool(decode)
        #: float32 [L, full_ids, kv_heads]: predicted KVzip score of each full id, per layer and KV head
        self.scores = torch.zeros(scorer.num_layers, int(full_ids), scorer.kv_heads, dtype=torch.float32)
        #: the forward in progress: its full ids (int64 [n]), None outside a captured forward
        self.loc: Optional[torch.Tensor] = None
        self._fired: list[bool] = []
        self.counters = {"forwards": 0, "tokens": 0, "seconds": 0.0, "missed": 0}
        self._handles: list = []

    # -- capture -------------------------------------------------------------------------------
    def install(self, model) -> None:
        """Forward hooks on every decoder layer's ``input_layernorm`` of ``model`` (once)."""
        if self._handles:
            return
        layers = decoder_layers(model)
        if len(layers) != self.scorer.num_layers:
            raise RuntimeError(f"the scorer has {self.scorer.num_layers} layers, the served model {len(layers)}")
        self._handles = [lay.input_layernorm.register_forward_hook(self._hook(i)) for i, lay in enumerate(layers)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def begin(self, forward_batch) -> bool:
        """A forward of ``forward_batch`` starts: capture it if it writes tokens this scorer needs
        (extend and mixed always; decode when :attr:`decode`). Returns whether it is captured."""
        mode = forward_batch.forward_mode
        loc = getattr(forward_batch, "out_cache_loc", None)
        if mode is None or mode.is_idle() or loc is None or loc.numel() == 0 or (mode.is_decode() and not self.decode):
            self.loc = None
            return False
        self.loc = loc.detach().long().cpu()
        self._fired = [False] * self.scorer.num_layers
        return True

    def end(self) -> None:
        """The captured forward ended: a layer whose hook did not fire leaves the tokens' scores NaN."""
        if self.loc is None:
            return
        loc, self.loc = self.loc, None
        self.counters["forwards"] += 1
        self.counters["tokens"] += int(loc.numel())
        if not all(self._fired):
            missing = [i for i, f in enumerate(self._fired) if not f]
            self.scores[:, loc] = float("nan")
            self.counters["missed"] += int(loc.numel())
            logger.warning("sglang_pask: learned scorer: layers %s gave no attention input in a forward of %d "
                           "token(s); those tokens have no score", missing, int(loc.numel()))

    def _hook(self, layer: int):
        def fn(_module, _args, output):
            loc = self.loc
            if loc is None:
                return None
            t0 = time.perf_counter()
            x = output[0] if isinstance(output, (tuple, list)) else output  # SGLang: (normed, residual)
            if x.dim() != 2 or x.shape[0] != loc.numel() or self._fired[layer]:
                self._fired[layer] = False  # end() marks the forward's tokens unscored
                return None
            s = self.scorer.scores(layer, x.detach().float().cpu().numpy())  # [H, n]
            self.scores[layer, loc] = torch.from_numpy(np.ascontiguousarray(s.T))
            self._fired[layer] = True
            self.counters["seconds"] += time.perf_counter() - t0
            return None
        return fn

    # -- read ----------------------------------------------------------------------------------
    def heads(self, full_ids: torch.Tensor, retained: list[np.ndarray],
              masks: Optional[list[Optional[np.ndarray]]] = None) -> list[np.ndarray]:
        """Per layer, float32 ``[kv_heads, n_l]`` aligned with ``retained[l]`` (logical positions
        the layer holds; ``full_ids`` int64 ``[seq_len]``: the request's full id at each position):
        the predicted KVzip scores, 0 where a KV head no longer holds a position (``masks[l]``:
        bool ``[kv_heads, n_l]`` or None), as the runner's ``learned_heads``."""
        ids = full_ids.long().cpu()
        out = []
        for layer, pos in enumerate(retained):
            s = self.scores[layer, ids[torch.from_numpy(np.asarray(pos, dtype=np.int64))]].T.numpy()
            if np.isnan(s).any():
                raise RuntimeError(f"layer {layer}: the learned scorer has no score for some held positions")
            m = None if masks is None else masks[layer]
            out.append(s.copy() if m is None else s * m)
        return out

    def stats(self) -> dict:
        """JSON-ready counters (``/server_info``: ``learned_scorer``): captured forwards, their
        tokens, the seconds spent scoring them (inside those forwards), tokens left unscored."""
        return {**self.counters, "seconds": round(self.counters["seconds"], 6), "decode": self.decode,
                "scores_bytes": int(self.scores.numel() * self.scores.element_size())}


# --- hooks (declared in .seam) -----------------------------------------------------------------

def after_init_backends(_result, runner) -> None:
    """``ModelRunner.init_attention_backends`` (AFTER): with a ``learned_heads`` serving method,
    the scores (sized by the pool's full ids) and the capture hooks on the loaded model."""
    from sglang_pask.srt.mem_cache.pools import PaskKVPool
    from sglang_pask.srt.serving import active_config

    pool = getattr(runner, "token_to_kv_pool", None)
    config = active_config()
    if not isinstance(pool, PaskKVPool) or config is None or config.scorer is None:
        return
    if pool.head_num != config.scorer.kv_heads:  # tensor parallelism: this rank holds a share of the heads
        raise RuntimeError(f"sglang_pask: {config.method.name}: the scorer predicts {config.scorer.kv_heads} KV "
                           f"heads, this rank's pool holds {pool.head_num} (tensor parallelism is not supported "
                           "for the learned scorer)")
    if pool.learned_scores is None:
        pool.learned_scores = LearnedScores(config.scorer, pool.mapping.shape[1],
                                            decode=config.method.schedule != "prefill")
    pool.learned_scores.install(runner.model)


def around_forward(original, runner, *args, **kwargs):
    """``ModelRunner.forward`` (AROUND): the forward's full ids for the capture hooks, for its length."""
    learned = getattr(getattr(runner, "token_to_kv_pool", None), "learned_scores", None)
    batch = args[0] if args else kwargs.get("forward_batch")
    if learned is None or batch is None or not learned.begin(batch):
        return original(runner, *args, **kwargs)
    try:
        return original(runner, *args, **kwargs)
    finally:
        learned.end()
