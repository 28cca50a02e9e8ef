"""The hot operators of batched compression, compiled (csrc/, ``torch.ops.sglang_pask.*``) when
the extension was built, else their reference (:mod:`.reference`, same contracts, same results:
``test_ops.py``). :func:`top_n_mask_tensor` takes torch tensors on any device: the compiled kernel
for that device, else one sort per row (:mod:`.top_n`). The Triton kernels of the GPU path and
their torch fallbacks are in :mod:`.triton_kernels` (imported on use: it imports triton).

:func:`implementation` says which runs and why (the server logs it at start-up and shows it in
``/server_info``). ``SGLANG_PASK_OPS=reference`` forces the reference (for A/B runs and tests).
The extension is ``sglang_pask/_pask_ops*.so``, built by ``make install`` (setup.py build_ext
--inplace); it registers its operators with torch, so it is loaded with ``torch.ops.load_library``.
torch is imported on first use, not here: ``pask``'s command discovery imports every subpackage,
and a bad argument must be refused before torch loads (``test_paths_cli.py``).
"""

from __future__ import annotations

import functools
import glob
import os
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["implementation", "top_n_mask", "top_n_mask_tensor", "take_slots", "decode_attention", "compiled"]


@functools.lru_cache(maxsize=None)
def _load() -> tuple[object, str]:
    """(``torch.ops.sglang_pask`` or None, a one-line description of what runs)."""
    from sglang_pask.environ import envs

    if envs.SGLANG_PASK_OPS.get() == "reference":
        return None, f"torch reference ({envs.SGLANG_PASK_OPS.name}=reference)"
    import torch

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = sorted(glob.glob(os.path.join(here, "_pask_ops*.so")))
    if not found:
        return None, "torch reference (csrc extension not built: run `make install`, or see its build output)"
    try:
        torch.ops.load_library(found[0])
        ns = torch.ops.sglang_pask
        ns.top_n_mask  # noqa: B018 -- resolves the op: a stale library fails here, not mid-step
    except (OSError, RuntimeError, AttributeError) as e:
        return None, f"torch reference (csrc extension {os.path.basename(found[0])} failed to load: {e})"
    cuda = torch._C._dispatch_has_kernel_for_dispatch_key("sglang_pask::top_n_mask", "CUDA")
    return ns, f"csrc {os.path.basename(found[0])} (CPU{', CUDA' if cuda else ''})"


def compiled():
    """``torch.ops.sglang_pask`` when the extension is loaded, else None."""
    return _load()[0]


@functools.lru_cache(maxsize=None)
def _compiled_with(name: str):
    """:func:`compiled` if its library has operator ``name`` (a library built before the operator
    existed has not), else None; checked once (the decode path asks every layer)."""
    ops = compiled()
    return ops if ops is not None and hasattr(ops, name) else None


def implementation() -> str:
    """Which implementation runs, in one line (``csrc ... (CPU)`` or ``torch reference (why)``)."""
    return _load()[1]


def top_n_mask(held: np.ndarray, scores: np.ndarray, n: np.ndarray, tail_start: np.ndarray) -> np.ndarray:
    """bool ``[R, T]`` (:func:`.reference.top_n_mask`'s contract), compiled when available."""
    ops = compiled()
    if ops is None:
        from sglang_pask.ops import reference

        return reference.top_n_mask(held, scores, n, tail_start)
    import torch

    out = ops.top_n_mask(torch.from_numpy(np.ascontiguousarray(held, dtype=bool)),
                         torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float64)),
                         torch.from_numpy(np.ascontiguousarray(n, dtype=np.int64)),
                         torch.from_numpy(np.ascontiguousarray(tail_start, dtype=np.int64)))
    return out.numpy()


def top_n_mask_tensor(held: "torch.Tensor", scores: "torch.Tensor", n: "torch.Tensor",
                      tail_start: "torch.Tensor") -> "torch.Tensor":
    """bool ``[R, T]`` on ``held``'s device (:func:`.reference.top_n_mask`'s contract) for torch
    tensors on any device: the compiled kernel where the library has one for that device, else one
    stable sort per row (:func:`.top_n.top_n_mask_torch`, O(T log T))."""
    import torch

    ops = compiled()
    device = held.device.type.upper()
    if ops is not None and torch._C._dispatch_has_kernel_for_dispatch_key("sglang_pask::top_n_mask", device):
        return ops.top_n_mask(held, scores.to(torch.float64), n.to(held.device, torch.int64),
                              tail_start.to(held.device, torch.int64))
    from sglang_pask.ops.top_n import top_n_mask_torch

    return top_n_mask_torch(held, scores, n, tail_start)


def take_slots(mapping: "torch.Tensor", unit: int, full_ids: "torch.Tensor") -> "torch.Tensor":
    """int64 ``[M]`` (:func:`.reference.take_slots`'s contract; ``mapping`` changed in place),
    compiled when available and ``mapping`` is contiguous."""
    ops = compiled()
    if ops is None or not mapping.is_contiguous():
        from sglang_pask.ops import reference

        return reference.take_slots(mapping, unit, full_ids)
    return ops.take_slots(mapping, int(unit), full_ids)


def decode_attention(q: "torch.Tensor", k_buf: "torch.Tensor", v_buf: "torch.Tensor", slots: "torch.Tensor",
                     counts: "torch.Tensor", scale: float) -> "torch.Tensor":
    """``[B, H, Dv]`` (:func:`.reference.decode_attention`'s contract), compiled when available
    for CPU tensors of one dtype (it reads the KV rows in place: no gathered copy)."""
    ops = _compiled_with("decode_attention")
    if ops is None or q.device.type != "cpu" or not (q.dtype == k_buf.dtype == v_buf.dtype):
        from sglang_pask.ops import reference

        return reference.decode_attention(q, k_buf, v_buf, slots, counts, scale)
    return ops.decode_attention(q, k_buf, v_buf, slots, counts, float(scale))
