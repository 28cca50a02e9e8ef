"""One owner of a scheduler's PASK state (STYLE.md 25): every counter, log and per-request cache
the plugin keeps while it serves lives in one :class:`PaskState`, not in module globals.

The seam attaches it to the scheduler (``Scheduler._pask_state``, a BEFORE hook on
``Scheduler.init_model_worker``: before the model, the pools and the attention backends are built,
so everything that writes state later finds it); ``GET /server_info`` reads that object
(:meth:`PaskState.record`). A scheduler is one process (SGLang starts one per TP/DP rank), so the
hooks that see no scheduler (xgrammar's, the attention backends', the pools') reach the same object
through the one accessor :func:`state`. Tests start from a fresh one with :func:`reset`.

Standard library only: every subsystem imports this module, it imports none of them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional


def _counts(*names: str, seconds: tuple[str, ...] = ()) -> Any:
    return field(default_factory=lambda: {**{n: 0 for n in names}, **{n: 0.0 for n in seconds}})


@dataclass(eq=False)
class PaskState:
    """What one scheduler process holds for PASK while it serves (field comments say who writes)."""

    # -- counters (``/server_info``, ``internal_states[0]["pask"]``) --
    #: request tags read in the scheduler (managers/request_tags): ``tags``
    tags: dict = _counts("tagged", "untagged", "output_fallback", "forged", "refused")
    #: compressions at the eviction point (managers/persist): ``compression``
    compression: dict = _counts("compressions", "requests_compressed", "errors", "batch_fallbacks")
    #: the decode loop's wall time and compression's part of it (managers/persist): ``decode_steps``
    #: timed, ``step_s`` their summed period (gaps over persist.IDLE_GAP_S are idle, not counted),
    #: ``compress_s`` inside compress_batch: ``compression_time``
    times: dict = _counts("decode_steps", seconds=("step_s", "compress_s"))
    #: batched decode forwards' held-slot index (attention/torch_native_backend): built whole or
    #: grown from the step before by each row's new token: ``decode_index``
    decode_index: dict = _counts("built", "appended")
    #: KVzip's scoring forwards (attention/reconstruct): ``reconstruction``
    reconstruction: dict = _counts("scored", "forwards", "tokens", seconds=("seconds",))
    #: shared segments (managers/segments) and their views (mem_cache/segment_views): ``segments``
    segments: dict = _counts("segments_compressed", "segment_slots_dropped", "segment_chunks_forced",
                             "segment_chunks_deferred")
    views_made: dict = _counts("views", "views_on_demoted")
    #: whole blocks demoted to their compressed form and the unit slots freed (mem_cache/radix_cache)
    demotion: dict = _counts("demoted", "demoted_slots")
    #: the chunked prefill rule (managers/chunked, managers/prefill_hooks): ``chunked_prefill``
    chunked: dict = _counts("chunked_requests", "chunk_compressions", "chunk_slots_dropped", "chunks_deferred",
                            "chunks_parked", "errors")

    # -- logs --
    #: the last released requests, newest last: what each held per unit when its KV was freed
    #: (managers/persist.record_release): ``released``
    released: deque = field(default_factory=lambda: deque(maxlen=256))
    #: the newest requests whose view was on a demoted block (mem_cache/segment_views): ``demoted_rids``
    demoted_rids: deque = field(default_factory=lambda: deque(maxlen=4096))

    # -- caches and per-request-row state --
    #: request-pool row -> (rid, segment end S, per unit bool [S] masks): the views of whole
    #: shared segments (mem_cache/segment_views)
    views: dict = field(default_factory=dict)
    #: request-pool row -> unit -> (positions int64 [n], mask bool [kv_heads, n]): per-KV-head
    #: selections (attention/head_masks)
    head_masks: dict = field(default_factory=dict)
    #: the attention statistics recorder when the method reads them (attention/window_stats)
    recorder: Optional[Any] = None
    #: the torch attention backend when the method reads KVzip's scores (attention/reconstruct)
    reconstruct_backend: Optional[Any] = None
    #: the chunked prefill rule and the unit pool's slots, fixed once the pools are built (managers/chunked)
    chunk_rule: Optional[Any] = None
    capacity: int = 0
    #: what bounds a prompt here, recorded once the pools are built (managers/prompt_limits)
    limits: Optional[Any] = None
    #: xgrammar's decoded vocabulary, built once: one process serves one tokenizer (managers/output_tags)
    vocab: Optional[list] = None
    #: when the last decode step's eviction point ran (perf_counter; managers/persist)
    last_step: Optional[float] = None

    def record(self, config, allocator=None, tree=None, kernels: str = "", batched: bool = True) -> dict:
        """JSON-ready, as ``/server_info`` shows it (``internal_states[0]["pask"]``): the serving
        ``config`` (None: PASK off in this process), the counters and logs; with ``allocator`` (a
        PASK allocator) its pools and the learned scorer's counters, with ``tree`` (one that has
        ``stats()``) the radix tree's; ``kernels``: which operators run, ``batched``: whether compression
        runs batched."""
        rule = config.rule if config else None
        out = {"method": config.method.record() if config else None,
               "segment": rule.segment if rule else None, "radix_cache": bool(config and config.radix),
               "segment_budget": rule.segment_budget if rule else None,
               "own_budget": rule.own_budget if rule else None,
               "segment_prefill": rule.segment_prefill if rule and rule.active else None,
               "operating_point": config.resolved.record() if config else None,
               "tags": dict(self.tags), "compression": dict(self.compression),
               "compression_time": {**self.times, "batched": batched},
               "reconstruction": dict(self.reconstruction), "decode_index": dict(self.decode_index),
               "learned_scorer": learned.stats() if (learned := getattr(getattr(allocator, "pool", None),
                                                                       "learned_scores", None)) else None,
               "kernels": kernels,
               "segments": {**self.segments, **self.views_made}, "released": list(self.released),
               "demoted_rids": list(self.demoted_rids),
               "chunked_prefill": {"rule": self.chunk_rule.record() if self.active_chunk_rule() else None,
                                   **self.chunked}}
        if allocator is not None:
            out["pools"] = allocator.stats()
            if hasattr(tree, "stats"):
                out["tree"] = tree.stats()
        return out

    def active_chunk_rule(self):
        """The chunked prefill rule in force (None: prompts are written whole)."""
        r = self.chunk_rule
        return r if r is not None and r.active else None


_STATE: Optional[PaskState] = None


def state() -> PaskState:
    """This scheduler process's state (made on first use; the seam attaches it to the scheduler)."""
    global _STATE
    if _STATE is None:
        _STATE = PaskState()
    return _STATE


def reset() -> PaskState:
    """A fresh state for this process (tests: every counter at zero, every cache empty)."""
    global _STATE
    _STATE = PaskState()
    return _STATE


def before_init_model_worker(scheduler, *args, **kwargs) -> None:
    """``Scheduler.init_model_worker`` (BEFORE, declared in :mod:`.seam`): the scheduler owns this
    process's state from before its model, pools and attention backends are built."""
    scheduler._pask_state = state()
