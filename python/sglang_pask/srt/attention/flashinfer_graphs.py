"""Fixed-capacity per-unit index buffers for decode under CUDA graphs (the PASK FlashInfer
backend's graph state; pure torch, imports without flashinfer). UNTESTED on a GPU: the
bookkeeping is tested on CPU (``test/unit/srt/test_srt_flashinfer_graphs.py``).

SGLang's decode graph runner calls, on the backend: ``init_cuda_graph_state(max_bs, max_num_tokens)``
once at start-up (these buffers are allocated then); ``init_forward_metadata_out_graph(fb,
in_capture=True)`` before capturing each batch size (one decode wrapper per unit in CUDA-graph mode,
bound to these buffers, planned with every row a padding row); ``init_forward_metadata_out_graph(fb)``
before each replay, with ``fb`` the batch padded to a captured size (its streams written here in
place, the same wrappers re-planned).

A captured decode graph launches each unit's FlashInfer decode kernel on tensors whose
addresses are fixed at capture. So the index streams of :func:`.flashinfer_backend.build_unit_indices`
(``kv_indptr_u``, ``kv_indices_u``; a page is one unit slot, so every last-page length is 1)
live, under graphs, in buffers allocated once, at start-up, and rewritten in place before every
replay (:meth:`GraphIndexBuffers.fill`). One set per unit ``u``, shared by every captured batch
size (a wrapper for ``bs`` sees ``kv_indptr[u][:bs + 1]``, ``last_page_len[:bs]`` and all of
``kv_indices[u]``):

    kv_indptr[u]   int32 [max_bs + 1]
      [0, r]           real rows: the eager build over rows 0..r-1 (r = bs - padding)
      [r + 1, bs]      padding rows: n + 1, ..., n + padding (one key each)
      [bs + 1, max_bs] not read by this batch size's wrappers (stale)
    kv_indices[u]  int32 [capacity[u]]
      [0, n)           the real rows' held unit slots (views already applied), request by request
      [n, n + padding) 0: slot 0, the unit's padding slot (never a key of a request)
      [n + padding, )  not read (stale)
    last_page_len  int32 [max_bs]: all ones, written once

SGLang pads a replayed batch to the captured size with rows of ``req_pool_indices`` 0 and
``seq_lens`` 1 at the tail (their ``out_cache_loc`` is 0, whose unit slot is 0): those rows read
the padding slot only, never a live request's keys, and their outputs are discarded.

Capacity (:func:`capacities`): a row reads at most ``min(max_context_len, unit_sizes[u])`` slots
(a request's held slots are distinct). Without the radix cache no two requests share a full id,
so a batch reads at most the unit's live slots plus one per padding row: ``unit_sizes[u] +
max_bs``. With it (``--pask-segment system``) requests read one shared segment's slots each, so the
bound is per row: ``max_bs * min(max_context_len, unit_sizes[u])``. A batch past the capacity
(only if an invariant above broke) is refused with one line, before anything is written.
"""

from __future__ import annotations

from typing import Sequence

import torch


def capacities(unit_sizes: Sequence[int], max_bs: int, max_context_len: int, shared: bool) -> list[int]:
    """Keys each unit's ``kv_indices`` buffer holds for a decode batch of up to ``max_bs`` rows
    (module docstring). ``shared``: requests may share slots (the radix cache is on)."""
    out = []
    for size in unit_sizes:
        per_batch = max_bs * max(min(int(max_context_len), int(size)), 1)
        out.append(per_batch if shared else min(int(size) + max_bs, per_batch))
    return out


class GraphIndexBuffers:
    """The per-unit buffers of the module docstring, allocated once; :meth:`fill` rewrites them
    in place and never replaces a tensor (captured kernels hold their addresses)."""

    def __init__(self, capacity: Sequence[int], max_bs: int, device):
        self.max_bs = int(max_bs)
        self.capacity = [int(c) for c in capacity]
        #: per unit, int32 [max_bs + 1]
        self.kv_indptr = [torch.zeros(self.max_bs + 1, dtype=torch.int32, device=device) for _ in self.capacity]
        #: per unit, int32 [capacity[u]]
        self.kv_indices = [torch.zeros(c, dtype=torch.int32, device=device) for c in self.capacity]
        #: int32 [max_bs], all ones (page size 1)
        self.last_page_len = torch.ones(self.max_bs, dtype=torch.int32, device=device)
        # int32 [max_bs + 1]: 0, 1, ..., max_bs (the padding rows' indptr steps, without a per-replay arange)
        self._steps = torch.arange(self.max_bs + 1, dtype=torch.int32, device=device)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.kv_indptr, *self.kv_indices, self.last_page_len))

    def fill(self, units: Sequence[tuple[torch.Tensor, torch.Tensor]], bs: int, padding: int) -> list[int]:
        """Write one batch in place: ``units[u] = (kv_indptr int32 [r + 1], kv_indices int32 [n_u])``,
        :func:`.flashinfer_backend.build_unit_indices` over the ``r = bs - padding`` real rows, then
        ``padding`` rows of one key each (slot 0). Returns per unit the keys written (``n_u +
        padding``). Raises (writing nothing) when a unit's keys exceed its capacity."""
        if not 0 <= padding <= bs <= self.max_bs:
            raise ValueError(f"batch of {bs} rows ({padding} padding) for CUDA-graph buffers of {self.max_bs}")
        if len(units) != len(self.capacity):
            raise ValueError(f"{len(units)} unit index streams for {len(self.capacity)} units")
        real = bs - padding
        nnz = [int(indices.numel()) for _, indices in units]
        for u, (n, cap) in enumerate(zip(nnz, self.capacity)):
            if int(units[u][0].numel()) != real + 1:
                raise ValueError(f"unit {u}: kv_indptr of {units[u][0].numel()} entries for {real} rows")
            if n + padding > cap:
                raise RuntimeError(f"sglang_pask: a CUDA-graph decode batch reads {n + padding} keys in unit {u}, "
                                   f"more than the {cap} its index buffer holds (sized at start-up from the unit "
                                   "pool); run with --cuda-graph-backend-decode disabled")
        for u, ((kv_indptr, kv_indices), n) in enumerate(zip(units, nnz)):
            self.kv_indptr[u][:real + 1].copy_(kv_indptr)
            torch.add(self._steps[1:padding + 1], n, out=self.kv_indptr[u][real + 1:bs + 1])
            self.kv_indices[u][:n].copy_(kv_indices)
            self.kv_indices[u][n:n + padding].zero_()
        return [n + padding for n in nnz]
