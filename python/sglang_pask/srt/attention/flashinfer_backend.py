"""FlashInfer attention over per-unit KV sub-pools (GPU serving; the CPU reference is
:class:`.torch_native_backend.PaskTorchNativeAttnBackend`).

SGLang's sliding-window FlashInfer path keeps two "KV views" (two wrappers, each planned with
its own ``kv_indptr``/``kv_indices``) and picks one per layer. This backend generalises that to
``U`` views, one per unit of :class:`..mem_cache.pools.PaskKVPool`:

* **Index streams** (:func:`build_unit_indices`, once per forward): for unit ``u`` and request
  ``i`` (row ``r_i = req_pool_indices[i]``, length ``n_i``), the keys are the *held* unit slots
  ``m = mapping[u, req_to_token[r_i, :n_i]]``, ``m > 0``, in logical (position) order. They are
  concatenated into ``kv_indices_u`` (int32 ``[nnz_u]``) with ``kv_indptr_u`` (int32 ``[bs+1]``).
  FlashInfer sees page size 1, so a "page" is one unit slot and ``kv_last_page_len`` is all ones.
* **Wrappers**: one ``BatchDecodeWithPagedKVCacheWrapper`` and one
  ``BatchPrefillWithPagedKVCacheWrapper`` per unit, one shared ``BatchPrefillWithRaggedKVCache
  Wrapper``; all share SGLang's FlashInfer float workspace (each wrapper has its own int
  workspace, so plans do not clobber one another). Layer ``l`` uses the wrappers of unit
  ``pool.unit_of[l]`` and reads ``pool.get_kv_buffer(l)`` (the unit buffer, unit-slot indexed).
* **Writes** go through :meth:`..mem_cache.pools.PaskKVPool.set_kv_buffer` with the batch's full ids
  (``out_cache_loc``); the pool translates them to unit slots.

Decode: the new token is allocated (mapped in every unit) and written before attention, and
drops never touch a request's last token, so every row has ``>= 1`` key and all held keys precede
or equal the query: plain (non-causal) paged decode over ``kv_indices_u`` with ``seq_lens`` rows.

Extend (also MIXED, chunked prefill): the new tokens are always held; the prefix may be sparse.
Causality is by logical position, which FlashInfer's causal mask over a compacted key list would
get wrong, so each layer computes

    paged attention over the held *prefix* slots (non-causal: every prefix key precedes every
    new query) + ragged causal attention over the new tokens' own K/V,

merged by log-sum-exp (FlashInfer ``merge_state``, base-2 LSE). A unit with no held prefix in
the whole batch skips the paged part. K/V are written after attention (as SGLang's ragged path).

RoPE is already applied to K, so dropping keys never moves a position.

Attention statistics (:mod:`.window_stats`: the observation window, per layer or per KV head, and
the accumulated attention), for a served method that reads them: FlashInfer returns no
probabilities, so after each layer's attention (and its K/V write) the queries of every request
the recorder still records are scored again in torch over the held keys read back from the unit
buffer -- what the torch backend hands the recorder, so both record the same statistics. Under
the ``prefill`` schedule that is the prefill forward only. A per-KV-head *selection* (head masks)
cannot be applied by these kernels, so such methods are refused at start-up (``persist_hooks``).
UNTESTED on a GPU: on CPU the recording glue runs against the torch stand-in for the wrappers.

CUDA graphs, decode only (UNTESTED on a GPU; :mod:`.flashinfer_graphs` holds the buffers and their
index map): :meth:`~PaskFlashInferAttnBackend.init_cuda_graph_state` allocates, once, per unit index
buffers of a capacity fixed by the unit pool's size; capture makes, per captured batch size, one
decode wrapper per unit in CUDA-graph mode bound to them; the replay prep builds the real rows'
streams as the eager path does (:func:`build_unit_indices`, segment views applied), writes them
and the padding rows into the same buffers in place and re-plans the same wrappers. Per-KV-head
selections (head masks) stay refused on this backend, so none reaches the buffers.

Not supported (refused with a clear one-line error): CUDA graphs for prefill (pass
``--cuda-graph-backend-prefill disabled``: SGLang's CUDA default is breakable prefill graphs);
decode graphs for a method that reads attention statistics (the recorder and the learned scorer
work in torch per forward: ``--cuda-graph-backend-decode disabled``) and under SGLang's metadata
glue graph (``SGLANG_ENABLE_METADATA_GLUE_GRAPH``: the replay prep syncs on the host); speculative
decoding and other forward modes than EXTEND/MIXED/DECODE/IDLE, sliding-window,
cross-attention/encoder-decoder, encoder-only and multimodal models, multi-item scoring,
attention logit soft-capping, ``head_dim != v_head_dim``.

The index streams are a snapshot of ``mapping`` taken when the forward is planned (eager:
:meth:`PaskFlashInferAttnBackend.init_forward_metadata`; graphs: the replay prep); drops must not
free slots that an in-flight forward still reads.

FlashInfer is imported lazily in :class:`PaskFlashInferAttnBackend`, so this module imports
without it. On CPU (``test/unit/srt/test_srt_flashinfer_indices.py``, ``test_srt_flashinfer_graphs.py``)
only the pure-torch parts and the planning/dispatch/graph glue (against a torch stand-in for the
wrappers) are tested; the kernels are not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

from sglang_pask.ops import reference
from sglang_pask.srt.attention import window_stats
from sglang_pask.srt.attention.flashinfer_graphs import GraphIndexBuffers, capacities
from sglang_pask.srt.mem_cache import segment_views

logger = logging.getLogger("sglang_pask")

_PREFILL_GRAPH_MSG = ("sglang_pask: the PASK FlashInfer backend runs CUDA graphs for decode only (its prefill "
                      "re-plans per-unit indices on the host); start the server with "
                      "--cuda-graph-backend-prefill disabled")
_CAPTURED_PLAN_MSG = ("sglang_pask: PASK FlashInfer planning ran inside a CUDA-graph capture (it is host work); "
                      "only decode graphs, planned through init_forward_metadata_out_graph, are supported")

# FlashInfer's merge_state CUDA kernel launches (head_dim / vec, num_heads) threads per block.
_MAX_THREADS_PER_BLOCK = 1024


def build_unit_indices(mapping: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                       seq_lens: torch.Tensor, *,
                       seq_lens_sum: Optional[int] = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-unit FlashInfer index streams over the held slots of each request (pure torch).

    Args:
        mapping: int64 ``[U, full_size + 2]``; ``mapping[u, full_id]`` is the unit slot (0: not
            held in unit ``u``; slot 0 is the padding slot and never a key).
        req_to_token: int ``[req_pool_size, max_context_len]``, full ids per request row.
        req_pool_indices: int ``[bs]``, the row of each request.
        seq_lens: int ``[bs]`` (>= 0), how many leading tokens of each row to consider (decode:
            the sequence lengths, the new token included; extend: the prefix lengths).
        seq_lens_sum: ``sum(seq_lens)`` when the caller knows it on the host (saves a sync).

    All tensors live on one device; the result is on ``mapping.device``.

    Returns:
        ``U`` pairs ``(kv_indptr, kv_indices)``: int32 ``[bs + 1]`` and int32 ``[nnz_u]``.
        Invariants: ``kv_indptr[0] == 0``; ``kv_indptr`` is non-decreasing with
        ``kv_indptr[i+1] - kv_indptr[i] <= seq_lens[i]``; ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]``
        equals ``mapping[u, req_to_token[r_i, :seq_lens[i]]]`` with the zeros removed, in logical
        order (the slots of :func:`..mem_cache.segment_views.held_slots`); every entry is ``> 0``.
    """
    views = segment_views.views()  # the accurate radix mode's views, as dense masks
    view_lens, view_keep = (reference.dense_views(views, req_pool_indices, int(mapping.shape[0])) if views
                            else (None, None))
    return reference.unit_indices(mapping, req_to_token, req_pool_indices, seq_lens, view_lens, view_keep,
                                  seq_lens_sum=seq_lens_sum)


def merge_lse_states(o_a: torch.Tensor, s_a: torch.Tensor, o_b: torch.Tensor,
                     s_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the union of two disjoint key sets from the two partial results (pure torch;
    the fallback for FlashInfer's ``merge_state`` when its kernel cannot launch).

    ``o_*``: ``[n, heads, d]``; ``s_*``: float32 ``[n, heads]``, base-2 log-sum-exp of the scaled
    logits (FlashInfer's convention); ``-inf`` marks an empty key set (its ``o`` is ignored).
    Returns ``(o [n, heads, d] in o_a's dtype, s float32 [n, heads])``.
    """
    s_a, s_b = s_a.float(), s_b.float()
    s_max = torch.maximum(s_a, s_b)
    s_max = torch.where(torch.isneginf(s_max), torch.zeros_like(s_max), s_max)
    w_a, w_b = torch.exp2(s_a - s_max), torch.exp2(s_b - s_max)
    total = w_a + w_b
    denom = torch.where(total > 0, total, torch.ones_like(total))
    part_a = torch.where((w_a > 0)[..., None], o_a.float() * (w_a / denom)[..., None], 0.0)
    part_b = torch.where((w_b > 0)[..., None], o_b.float() * (w_b / denom)[..., None], 0.0)
    return (part_a + part_b).to(o_a.dtype), torch.log2(total) + s_max


def _merge_state_fits(num_heads: int, head_dim: int, element_size: int) -> bool:
    """Whether FlashInfer's merge_state kernel fits in one block (its vector width rule)."""
    vec = max(16 // element_size, head_dim // 32)
    return num_heads * max(head_dim // vec, 1) <= _MAX_THREADS_PER_BLOCK


def _prefill_graphs_requested() -> bool:
    """True when SGLang's published CUDA-graph config enables prefill graphs (False if unpublished)."""
    try:
        from sglang.srt.model_executor.cuda_graph_config import Backend, Phase
        from sglang.srt.runtime_context import get_exec

        cfg = get_exec().graph.cuda_graph_config
    except Exception:
        return False
    if cfg is None:
        return False
    return getattr(getattr(cfg, Phase.PREFILL, None), "backend", Backend.DISABLED) != Backend.DISABLED


@dataclass
class PaskFlashInferMetadata:
    """What :meth:`PaskFlashInferAttnBackend.init_forward_metadata` planned for this forward.

    ``decode``: decode wrappers planned (else ragged + per-unit prefix wrappers); ``unit_nnz[u]``:
    keys planned in unit ``u`` (decode: all held keys, a CUDA-graph batch's padding rows' included;
    extend: held prefix keys); ``has_prefix[u]`` (extend): unit ``u``'s paged prefix wrapper was
    planned (``unit_nnz > 0``); ``wrappers`` (decode): the planned decode wrapper of each unit (the
    eager ones, or a captured batch size's CUDA-graph ones).
    """

    decode: bool
    unit_nnz: list[int]
    has_prefix: list[bool]
    wrappers: Optional[list] = None


class PaskFlashInferAttnBackend(AttentionBackend):
    """FlashInfer over the held slots of each unit: one decode and one paged-prefill wrapper per
    unit, one ragged wrapper, planned once per forward (see the module docstring)."""

    def __init__(self, model_runner):
        super().__init__()
        try:
            from flashinfer import (
                BatchDecodeWithPagedKVCacheWrapper,
                BatchPrefillWithPagedKVCacheWrapper,
                BatchPrefillWithRaggedKVCacheWrapper,
            )
            from flashinfer.cascade import merge_state
        except ImportError as e:
            raise RuntimeError("sglang_pask: --attention-backend flashinfer needs the flashinfer package "
                               "(not importable here); use --attention-backend torch_native on CPU") from e
        from sglang.srt.environ import envs
        from sglang.srt.runtime_context import get_buffer, get_parallel

        from sglang_pask.srt.mem_cache.pools import PaskKVPool

        pool = model_runner.token_to_kv_pool
        if not isinstance(pool, PaskKVPool):
            raise RuntimeError(f"sglang_pask: the PASK FlashInfer backend needs a PaskKVPool, got "
                               f"{type(pool).__name__}")
        self._refuse_unsupported(model_runner)
        if _prefill_graphs_requested():
            raise RuntimeError(_PREFILL_GRAPH_MSG)

        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = pool
        self.pool: PaskKVPool = pool
        self.kv_index_translator = getattr(model_runner, "kv_index_translator", None)
        self.device = model_runner.device

        cfg = model_runner.model_config
        par = get_parallel()
        tp, dcp = par.attn_tp_size, getattr(par, "attn_dcp_size", 1)
        # Plan with the largest per-layer query head count (FlashInfer bakes it into the plan).
        max_heads = (cfg.get_max_num_attention_heads() if hasattr(cfg, "get_max_num_attention_heads")
                     else cfg.num_attention_heads)
        self.num_qo_heads = max_heads // tp
        self.num_kv_heads = cfg.get_num_kv_heads(tp, dcp)
        self.head_dim = cfg.head_dim
        if pool.head_dim != self.head_dim or pool.v_head_dim != self.head_dim:
            raise RuntimeError(f"sglang_pask: the PASK FlashInfer backend needs head_dim == v_head_dim == the "
                               f"pool's (model {self.head_dim}, pool {pool.head_dim}/{pool.v_head_dim})")
        if pool.head_num != self.num_kv_heads:
            raise RuntimeError(f"sglang_pask: the KV pool has {pool.head_num} heads per rank, the model "
                               f"{self.num_kv_heads}")
        self.q_dtype = model_runner.dtype
        self.kv_dtype = model_runner.kv_cache_dtype

        self.workspace = get_buffer("flashinfer_workspace", lambda: torch.empty(
            envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.get(), dtype=torch.uint8, device=self.device))
        use_tc = self._decode_tensor_cores(cfg.num_attention_heads // tp)
        num_units = len(pool.units)
        self.decode_wrappers = [
            BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD", backend="fa2", use_tensor_cores=use_tc)
            for _ in range(num_units)]
        self._decode_wrapper_cls, self._use_tensor_cores = BatchDecodeWithPagedKVCacheWrapper, use_tc
        self.prefill_wrappers = [BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD", backend="fa2")
                                 for _ in range(num_units)]
        self.ragged_wrapper = BatchPrefillWithRaggedKVCacheWrapper(self.workspace, "NHD",
                                                                   backend=self._ragged_backend())
        self._fi_merge_state = merge_state
        self._page_lens = torch.ones(max(int(self.req_to_token_pool.size), 1) + 1, dtype=torch.int32,
                                     device=self.device)
        self.forward_metadata: Optional[PaskFlashInferMetadata] = None
        from sglang_pask.srt.serving import active_config

        config = active_config()
        #: the statistics recorder the serving method needs (None: it needs none)
        self.recorder = window_stats.setup(config.method, self.num_kv_heads) if config is not None else None
        #: this forward's recorded requests: (row, q offset, q count, first position, per unit (slots, positions))
        self._recorded: list = []
        #: the serving method's name and the attention statistic it reads (None: none)
        self.method_name = config.method.name if config is not None else "the method"
        self.needs_attention = config.method.needs_attention if config is not None else None
        #: requests may read one another's slots (the radix cache shares segments): sizes the graph buffers
        self.shared_slots = bool(config.radix) if config is not None else True
        #: CUDA-graph state (:meth:`init_cuda_graph_state`): the buffers, and per captured batch size
        #: its decode wrappers (one per unit)
        self.graph_buffers: Optional[GraphIndexBuffers] = None
        self.graph_wrappers: dict[int, list] = {}

    # -- construction helpers ------------------------------------------------------------------
    @staticmethod
    def _refuse_unsupported(model_runner) -> None:
        cfg = model_runner.model_config
        what = None
        if getattr(model_runner, "sliding_window_size", None) is not None:
            what = "sliding-window attention"
        elif getattr(cfg, "is_encoder_decoder", False):
            what = "encoder-decoder (cross-attention) models"
        elif getattr(cfg, "is_multimodal", False):
            what = "multimodal models"
        else:
            try:
                from sglang.srt.runtime_context import get_exec

                if get_exec().features.enable_mis:
                    what = "multi-item scoring"
            except Exception:
                pass
        if what is not None:
            raise RuntimeError(f"sglang_pask: the PASK FlashInfer backend does not support {what}")

    def _decode_tensor_cores(self, num_attention_heads: int) -> bool:
        try:
            from sglang.srt.layers.attention.flashinfer_backend import should_use_tensor_core

            return bool(should_use_tensor_core(kv_cache_dtype=self.kv_dtype, num_attention_heads=num_attention_heads,
                                               num_kv_heads=self.num_kv_heads))
        except Exception:
            return num_attention_heads // max(self.num_kv_heads, 1) >= 4

    @staticmethod
    def _ragged_backend() -> str:
        try:
            from sglang.srt.runtime_context import get_platform

            return "fa2" if get_platform().is_sm100 else "auto"
        except Exception:
            return "fa2"

    # -- CUDA graphs: decode (see the module docstring) --------------------------------------------
    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        """Start-up: the per-unit index buffers for decode batches of up to ``max_bs`` rows, or a
        one-line refusal of what decode graphs cannot run."""
        from sglang.srt.environ import envs

        if self.needs_attention is not None:
            raise RuntimeError(f"sglang_pask: {self.method_name} reads attention statistics "
                               f"({self.needs_attention}), computed in torch per forward, which a CUDA graph "
                               "cannot replay; start the server with --cuda-graph-backend-decode disabled")
        if max_num_tokens != max_bs:
            raise RuntimeError(f"sglang_pask: the PASK FlashInfer backend captures one token per request "
                               f"(got {max_num_tokens} tokens for {max_bs} requests: speculative decoding)")
        if envs.SGLANG_ENABLE_METADATA_GLUE_GRAPH.get():
            raise RuntimeError("sglang_pask: SGLANG_ENABLE_METADATA_GLUE_GRAPH cannot capture the PASK FlashInfer "
                               "replay prep (it syncs on the host); unset it")
        caps = capacities(self.pool.unit_sizes, max_bs, int(self.req_to_token_pool.req_to_token.shape[1]),
                          self.shared_slots)
        self.graph_buffers = GraphIndexBuffers(caps, max_bs, self.device)
        self.graph_wrappers = {}
        logger.info("sglang_pask: FlashInfer CUDA-graph index buffers: %d unit(s), up to %s keys, %.2f MB "
                    "(max batch %d, %s)", len(caps), caps, self.graph_buffers.nbytes() / 1e6, max_bs,
                    "slots shared through the radix cache" if self.shared_slots else "no shared slots")

    def _graph_decode_wrappers(self, bs: int) -> list:
        """One decode wrapper per unit in CUDA-graph mode over the buffers' first ``bs`` rows, each
        planning into its unit's eager decode wrapper's int workspace (a forward plans a unit once;
        the replay prep re-plans before every replay)."""
        g = self.graph_buffers
        out = []
        for u, donor in enumerate(self.decode_wrappers):
            w = self._decode_wrapper_cls(self.workspace, "NHD", use_cuda_graph=True, backend="fa2",
                                         use_tensor_cores=self._use_tensor_cores,
                                         paged_kv_indptr_buffer=g.kv_indptr[u][:bs + 1],
                                         paged_kv_indices_buffer=g.kv_indices[u],
                                         paged_kv_last_page_len_buffer=g.last_page_len[:bs])
            w.reset_workspace_buffer(self.workspace, donor._int_workspace_buffer)
            w._pin_memory_int_workspace_buffer = donor._pin_memory_int_workspace_buffer  # not a per-bs 8 MB copy
            out.append(w)
        return out

    def _plan_graph_decode(self, fb, wrappers: list, padding: int) -> PaskFlashInferMetadata:
        """Write this batch's index streams into the graph buffers in place (rows ``bs - padding``
        on are padding rows) and plan ``wrappers`` on them."""
        bs = int(fb.batch_size)
        real = bs - padding
        lens_sum = getattr(fb, "seq_lens_sum", None)
        units = build_unit_indices(self.pool.mapping, self.req_to_token_pool.req_to_token,
                                   fb.req_pool_indices[:real], fb.seq_lens[:real],
                                   seq_lens_sum=None if lens_sum is None else int(lens_sum) - padding)
        g = self.graph_buffers
        nnz = g.fill(units, bs, padding)
        for u, (w, n) in enumerate(zip(wrappers, nnz)):
            w.begin_forward(g.kv_indptr[u][:bs + 1], g.kv_indices[u][:n], g.last_page_len[:bs], self.num_qo_heads,
                            self.num_kv_heads, self.head_dim, 1, q_data_type=self.q_dtype, kv_data_type=self.kv_dtype,
                            non_blocking=True)
        return PaskFlashInferMetadata(decode=True, unit_nnz=nnz, has_prefix=[n > 0 for n in nnz], wrappers=wrappers)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        """Capture: the batch size's wrappers (made at its first capture), planned with every row a
        padding row. Replay (a captured batch size): the batch's streams written into the same
        buffers, the same wrappers re-planned. Otherwise (no graph state): the eager plan."""
        fb = forward_batch
        mode = fb.forward_mode
        graph = self.graph_buffers is not None and mode.is_decode() and fb.spec_info is None
        if in_capture:
            if not graph:
                raise RuntimeError(_PREFILL_GRAPH_MSG if self.graph_buffers is not None and not mode.is_decode()
                                   else f"sglang_pask: cannot capture a {mode.name} batch in a CUDA graph "
                                        "(decode only, after init_cuda_graph_state)")
            bs = int(fb.batch_size)
            if bs not in self.graph_wrappers:  # another capture of this size (a variant) shares them
                self.graph_wrappers[bs] = self._graph_decode_wrappers(bs)
            self.forward_metadata = self._plan_graph_decode(fb, self.graph_wrappers[bs], padding=bs)
            self._recorded = []
        elif graph:
            bs = int(fb.batch_size)
            if bs not in self.graph_wrappers:
                raise RuntimeError(f"sglang_pask: CUDA-graph replay of a batch of {bs}, which was not captured")
            padding = int(getattr(fb, "num_padding", 0) or 0)
            self.forward_metadata = self._plan_graph_decode(fb, self.graph_wrappers[bs], padding)
            self._recorded = []
        else:
            self.init_forward_metadata(fb)

    def init_forward_metadata_for_breakable_cuda_graph_capture(self, forward_batch):
        raise RuntimeError(_PREFILL_GRAPH_MSG)

    def prepare_forward_metadata_for_breakable_cuda_graph_replay(self, capture_metadata, forward_batch, *,
                                                                 static_forward_batch=None):
        raise RuntimeError(_PREFILL_GRAPH_MSG)

    def prepare_full_cuda_graph_chunked_prefix(self, forward_batch, *, in_capture: bool):
        raise RuntimeError(_PREFILL_GRAPH_MSG)

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    # -- planning --------------------------------------------------------------------------------
    def init_forward_metadata(self, forward_batch):
        """Plan every unit's wrappers for this batch (host work: syncs to size ``kv_indices``)."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(_CAPTURED_PLAN_MSG)
        mode = forward_batch.forward_mode
        if mode.is_idle():
            self.forward_metadata = None
            return
        if forward_batch.spec_info is not None or mode.name not in ("DECODE", "EXTEND", "MIXED"):
            raise RuntimeError(f"sglang_pask: forward mode {mode.name} is not supported by the PASK FlashInfer "
                               "backend (speculative decoding, dLLM and split prefill are not)")
        if getattr(forward_batch, "encoder_lens", None) is not None:
            raise RuntimeError("sglang_pask: encoder-decoder batches are not supported")
        if mode.is_decode():
            self.forward_metadata = self._plan_decode(forward_batch)
        else:
            self.forward_metadata = self._plan_extend(forward_batch)
        self._recorded = self._plan_recording(forward_batch) if self.recorder is not None else []

    def _plan_recording(self, fb) -> list:
        """The requests of this forward whose queries the recorder keeps, with each unit's held
        (slots, positions) over the whole sequence (this forward's tokens included: they are
        mapped before the forward and written by the time :meth:`_record` runs)."""
        from sglang_pask.srt.mem_cache.segment_views import held_slots

        decode = fb.forward_mode.is_decode()
        rows = [int(r) for r in fb.req_pool_indices.tolist()]
        lens = [int(n) for n in fb.seq_lens.tolist()]
        news = [1] * len(rows) if decode else [int(e) for e in fb.extend_seq_lens.tolist()]
        out, offset = [], 0
        for r, n, e in zip(rows, lens, news):
            self.recorder.begin(r, n - e, n)
            if self.recorder.recording([r]):
                ids = self.req_to_token_pool.req_to_token[r, :n]
                out.append((r, offset, e, n - e, [held_slots(m, ids, r, u) for u, m in enumerate(self.pool.mapping)]))
            offset += e
        return out

    def _record(self, layer, q3: torch.Tensor) -> None:
        """Hand the recorder this layer's queries (``q3 [tokens, heads, d]``, requests in batch
        order) of every recorded request, over the held keys read back from the unit buffer."""
        unit = self.pool.unit_of[layer.layer_id]
        k_buf = self.pool.get_key_buffer(layer.layer_id)
        for row, offset, count, first, held in self._recorded:
            slots, k_pos = held[unit]
            qi = q3[offset:offset + count].movedim(0, 1)  # [heads, count, d]
            k = k_buf[slots].movedim(0, 1).to(qi.dtype)  # [kv_heads, nk, d]
            q_pos = torch.arange(first, first + count, device=k_pos.device)
            self.recorder.record(row, layer.layer_id, qi, k, q_pos, k_pos, layer.scaling)

    def _last_page_lens(self, bs: int) -> torch.Tensor:
        if self._page_lens.numel() < bs:
            self._page_lens = torch.ones(bs, dtype=torch.int32, device=self.device)
        return self._page_lens[:bs]

    def _plan_decode(self, fb) -> PaskFlashInferMetadata:
        bs = int(fb.seq_lens.shape[0])
        units = build_unit_indices(self.pool.mapping, self.req_to_token_pool.req_to_token, fb.req_pool_indices,
                                   fb.seq_lens, seq_lens_sum=getattr(fb, "seq_lens_sum", None))
        nnz = []
        for wrapper, (kv_indptr, kv_indices) in zip(self.decode_wrappers, units):
            wrapper.begin_forward(kv_indptr, kv_indices, self._last_page_lens(bs), self.num_qo_heads,
                                  self.num_kv_heads, self.head_dim, 1, q_data_type=self.q_dtype,
                                  kv_data_type=self.kv_dtype, non_blocking=True)
            nnz.append(int(kv_indices.numel()))
        return PaskFlashInferMetadata(decode=True, unit_nnz=nnz, has_prefix=[n > 0 for n in nnz],
                                      wrappers=self.decode_wrappers)

    def _plan_extend(self, fb) -> PaskFlashInferMetadata:
        bs = int(fb.extend_seq_lens.shape[0])
        prefix_cpu = getattr(fb, "extend_prefix_lens_cpu", None)
        units = build_unit_indices(self.pool.mapping, self.req_to_token_pool.req_to_token, fb.req_pool_indices,
                                   fb.extend_prefix_lens,
                                   seq_lens_sum=sum(int(x) for x in prefix_cpu) if prefix_cpu is not None else None)
        qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)
        qo_indptr[1:] = torch.cumsum(fb.extend_seq_lens.to(device=self.device, dtype=torch.int32), dim=0)
        # New tokens attend causally to one another (qo == kv per request, so the mask is exact).
        self.ragged_wrapper.begin_forward(qo_indptr, qo_indptr, self.num_qo_heads, self.num_kv_heads,
                                          self.head_dim, causal=True, q_data_type=self.q_dtype)
        nnz, has_prefix = [], []
        for wrapper, (kv_indptr, kv_indices) in zip(self.prefill_wrappers, units):
            n = int(kv_indices.numel())
            if n > 0:
                # Every held prefix key precedes every new query: no mask.
                wrapper.begin_forward(qo_indptr, kv_indptr, kv_indices, self._last_page_lens(bs), self.num_qo_heads,
                                      self.num_kv_heads, self.head_dim, 1, causal=False, q_data_type=self.q_dtype,
                                      kv_data_type=self.kv_dtype, non_blocking=True)
            nnz.append(n)
            has_prefix.append(n > 0)
        return PaskFlashInferMetadata(decode=False, unit_nnz=nnz, has_prefix=has_prefix)

    # -- compute ---------------------------------------------------------------------------------
    @staticmethod
    def _check_layer(layer) -> None:
        what = None
        if getattr(layer, "is_cross_attention", False):
            what = "cross-attention layers"
        elif getattr(getattr(layer, "attn_type", None), "name", "") == "ENCODER_ONLY":
            what = "encoder-only attention"
        elif (getattr(layer, "sliding_window_size", -1) or -1) >= 0:
            what = "sliding-window layers"
        elif (getattr(layer, "logit_cap", 0.0) or 0.0) > 0:
            what = "attention logit soft-capping"
        if what is not None:
            raise RuntimeError(f"sglang_pask: the PASK FlashInfer backend does not support {what}")

    def _write(self, layer, forward_batch, k, v) -> None:
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc

        self.pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch), k, v,
                                getattr(layer, "k_scale", None), getattr(layer, "v_scale", None))

    def _merge(self, o_a, s_a, o_b, s_b) -> torch.Tensor:
        if _merge_state_fits(o_a.shape[1], o_a.shape[2], o_a.element_size()):
            return self._fi_merge_state(o_a, s_a, o_b, s_b)[0]
        return merge_lse_states(o_a, s_a, o_b, s_b)[0]

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        """``q [bs, heads * head_dim]`` -> ``[bs, heads * v_head_dim]`` over unit ``unit_of[layer]``."""
        self._check_layer(layer)
        meta = self.forward_metadata
        assert meta is not None and meta.decode, "init_forward_metadata did not plan a decode batch"
        if k is not None and save_kv_cache:
            self._write(layer, forward_batch, k, v)
        unit = self.pool.unit_of[layer.layer_id]
        q3 = q.contiguous().view(-1, layer.tp_q_head_num, layer.head_dim)
        o = meta.wrappers[unit].forward(
            q3, self.pool.get_kv_buffer(layer.layer_id), sm_scale=layer.scaling,
            k_scale=getattr(layer, "k_scale_float", None), v_scale=getattr(layer, "v_scale_float", None))
        if self._recorded:
            self._record(layer, q3)
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        """``q [tokens, heads * head_dim]`` (the new tokens, requests concatenated) ->
        ``[tokens, heads * v_head_dim]``: held prefix of unit ``unit_of[layer]`` (paged) merged
        with the new tokens (ragged, causal)."""
        self._check_layer(layer)
        meta = self.forward_metadata
        assert meta is not None and not meta.decode, "init_forward_metadata did not plan an extend batch"
        unit = self.pool.unit_of[layer.layer_id]
        q3 = q.contiguous().view(-1, layer.tp_q_head_num, layer.head_dim)
        if k is None or v is None:
            # K/V already in the cache (written by the caller): read the new tokens' unit slots.
            slots = self.pool.translate(unit, forward_batch.out_cache_loc)
            k3 = self.pool.get_key_buffer(layer.layer_id)[slots].to(q3.dtype)
            v3 = self.pool.get_value_buffer(layer.layer_id)[slots].to(q3.dtype)
            write = False
        else:
            k3 = k.view(-1, layer.tp_k_head_num, layer.head_dim)
            v3 = v.view(-1, layer.tp_v_head_num, layer.v_head_dim)
            write = save_kv_cache
        if meta.has_prefix[unit]:
            o_new, s_new = self.ragged_wrapper.forward_return_lse(q3, k3, v3, causal=True, sm_scale=layer.scaling)
            o_pre, s_pre = self.prefill_wrappers[unit].forward_return_lse(
                q3, self.pool.get_kv_buffer(layer.layer_id), causal=False, sm_scale=layer.scaling,
                k_scale=getattr(layer, "k_scale_float", None), v_scale=getattr(layer, "v_scale_float", None))
            o = self._merge(o_pre, s_pre, o_new, s_new)
        else:
            o = self.ragged_wrapper.forward(q3, k3, v3, causal=True, sm_scale=layer.scaling)
        if write:
            # After attention: a dtype-converting write may scale k/v in place.
            self._write(layer, forward_batch, k, v)
        if self._recorded:  # after the write: the new tokens' keys are read back as the prefix's
            self._record(layer, q3)
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
