"""The Triton kernels (``ops/triton_kernels.py``) against their torch references, every case run by
Triton's interpreter on CPU and, where torch sees a GPU (``bench/gpu_check.sh``), compiled on CUDA.
Skipped only where triton is absent.

* FlashInfer's per-unit index streams: equal to :func:`reference.unit_indices` and to the torch code
  they would replace (``flashinfer_backend.build_unit_indices``, segment views included), with
  fixed-capacity buffers written in place and left alone past each unit's count.
* The learned scorer's fused projection, ``exp`` and per-head store: within one float32 ulp of the
  reference and of :meth:`LearnedScorer.scores` for float32, bfloat16 and float16 inputs, rows not
  written left alone, and row-stable (a row's scores do not depend on the rows beside it).

Why a child process: Triton 3.7.1 reads ``TRITON_INTERPRET`` when ``triton.jit`` wraps a function,
and ``triton.language``'s own helpers (``tl.sum``, ``tl.cumsum``, ``tl.zeros``) are wrapped when
triton is imported -- which SGLang's import does, non-interpreted, in any process that loaded
``srt``. So the CPU cases run in one fresh interpreter with the variable set from its start (this
file run as a script), and each case is one test here, reading the child's verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from sglang_pask.ops import reference, triton_kernels  # noqa: E402


# -- index streams ------------------------------------------------------------------------------------
def _batch(seed: int, units: int = 3, width: int = 300, bs: int = 5):
    """A mapping with about half the slots dropped, rows in a shuffled order, one request holding
    everything, one only its last token, one empty, and live ids past each length; lengths cross
    the kernels' 128-position steps."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, width + 1, (bs,), generator=g)
    lens[2] = 0
    lens[3] = 129
    rows = torch.randperm(bs + 3, generator=g)[:bs]
    full = bs * (width + 3) + 10
    req_to_token = torch.zeros((bs + 3, width + 4), dtype=torch.int32)
    perm = torch.randperm(full, generator=g) + 1
    used, spans = 0, []
    for r, n in zip(rows.tolist(), lens.tolist()):
        ids = perm[used:used + n + 3]
        used += n + 3
        req_to_token[r, :n + 3] = ids.to(torch.int32)
        spans.append(ids[:n])
    mapping = torch.zeros((units, full + 2), dtype=torch.int64)
    for u in range(units):
        mapping[u, perm[:used]] = torch.randperm(used, generator=g) + 1
        mapping[u, perm[:used][torch.rand(used, generator=g) < 0.5]] = 0
        mapping[u, spans[0]] = torch.arange(1, len(spans[0]) + 1) + 2 * full
        mapping[u, spans[1][:-1]] = 0
        mapping[u, spans[1][-1]] = 3 * full + u + 1
    return mapping, req_to_token, rows, lens


def _views(rows, lens, units, seed):
    """Segment views for requests 0 and 3 (``segment_views.views()``' shape)."""
    g = torch.Generator().manual_seed(100 + seed)
    views = {}
    for i in (0, 3):
        s = max(int(lens[i]) - 2, 1)
        views[int(rows[i])] = ("rid", s, [torch.rand(s, generator=g) < 0.4 for _ in range(units)])
    return views


def _on(device, *tensors):
    return [t.to(device) for t in tensors]


def case_unit_indices(device, seed, with_views):
    mapping, r2t, rows, lens = _batch(seed)
    vl, vk = reference.dense_views(_views(rows, lens, 3, seed), rows, 3) if with_views else (None, None)
    want = reference.unit_indices(mapping, r2t, rows, lens, vl, vk)
    views = _on(device, vl, vk) if with_views else (None, None)
    got = triton_kernels.unit_indices(*_on(device, mapping, r2t, rows, lens), view_lens=views[0], view_keep=views[1])
    assert len(got) == len(want) == 3
    for (gp, gi), (wp, wi) in zip(got, want):
        assert gp.dtype == gi.dtype == torch.int32 and gp.device.type == device
        assert torch.equal(gp.cpu(), wp) and torch.equal(gi.cpu(), wi)
        assert int(wp[3] - wp[2]) == 0  # the empty request


def case_unit_indices_into_fixed_buffers(device):
    """Replay-style: one pair of buffers sized once, two batches written into it; each unit's
    stream is exact and every entry past its count keeps what was there."""
    kv_indptr = torch.full((3, 6), -5, dtype=torch.int32, device=device)
    kv_indices = torch.full((3, 2000), -7, dtype=torch.int32, device=device)
    for seed in (3, 4):
        mapping, r2t, rows, lens = _batch(seed)
        before = kv_indices.clone()
        triton_kernels.unit_indices_into(*_on(device, mapping, r2t, rows, lens), kv_indptr, kv_indices)
        for u, (wp, wi) in enumerate(reference.unit_indices(mapping, r2t, rows, lens)):
            nnz = int(wp[-1])
            assert torch.equal(kv_indptr[u].cpu(), wp) and torch.equal(kv_indices[u, :nnz].cpu(), wi)
            assert torch.equal(kv_indices[u, nnz:], before[u, nnz:])


def case_unit_indices_equal_build_unit_indices(device):
    """The torch code the kernels would replace, with the accurate radix mode's views in its state."""
    pytest.importorskip("sglang")  # a bare GPU image (bench/gpu_check.sh) may lack it
    from sglang_pask.srt.attention.flashinfer_backend import build_unit_indices
    from sglang_pask.srt.state import state

    mapping, r2t, rows, lens = _batch(7)
    views = _views(rows, lens, 3, 7)
    saved, state().views = state().views, views
    try:
        want = build_unit_indices(mapping, r2t, rows, lens)
    finally:
        state().views = saved
    vl, vk = _on(device, *reference.dense_views(views, rows, 3))
    got = triton_kernels.unit_indices(*_on(device, mapping, r2t, rows, lens), view_lens=vl, view_keep=vk)
    for (gp, gi), (wp, wi) in zip(got, want):
        assert torch.equal(gp.cpu(), wp) and torch.equal(gi.cpu(), wi)


def case_unit_indices_of_empty_batches(device):
    mapping = torch.zeros((2, 10), dtype=torch.int64, device=device)
    r2t = torch.zeros((2, 4), dtype=torch.int32, device=device)
    for rows, lens in ((torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)),
                       (torch.tensor([1, 0]), torch.tensor([0, 0]))):
        for kv_indptr, kv_indices in triton_kernels.unit_indices(mapping, r2t, *_on(device, rows, lens)):
            assert kv_indptr.tolist() == [0] * (len(lens) + 1) and kv_indices.numel() == 0


# -- the learned scorer ---------------------------------------------------------------------------
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _scorer_case(seed: int, n: int = 37, d: int = 80, h: int = 3):
    """Hidden states (D past one 64-feature step, H not a power of two), weights, and a bias that
    drives head 2 past the clamp at exp(80)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, h, generator=g) * 0.3
    b = torch.tensor([0.5, -2.0, 85.0])[:h]
    return x, w, b


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in float32 ulps between two finite positive float32 tensors."""
    return int((a.contiguous().view(torch.int32).long() - b.contiguous().view(torch.int32).long()).abs().max())


def case_learned_scores(device, dtype):
    from sglang_pask.methods.learned import LearnedScorer
    from sglang_pask.policy.binding import ModelBinding

    x, w, b = _scorer_case(0)
    x = x.to(DTYPES[dtype])
    full = 90
    loc = torch.randperm(full, generator=torch.Generator().manual_seed(1))[:x.shape[0]]
    table = torch.full((full, w.shape[1]), float("nan"), device=device)
    triton_kernels.learned_scores_into(x.to(device), w.to(device), b.to(device), table, loc.to(device))
    got = table.cpu()
    assert _ulps(got[loc], reference.learned_scores(x, w, b)) <= 1
    assert torch.isnan(got[[i for i in range(full) if i not in set(loc.tolist())]]).all()  # rows not written
    assert float(got[loc, 2].max()) == float(np.float32(np.exp(80.0)))  # the clamp
    # the scorer the server runs (numpy, float64 sums) on the same hidden states, read as float32
    scorer = LearnedScorer(w[None].numpy(), b[None].numpy(), ModelBinding(
        num_layers=1, num_kv_heads=w.shape[1], head_dim=16, vocab_size=512, fingerprint="sha256:00000000000000aa"))
    assert _ulps(got[loc], torch.from_numpy(scorer.scores(0, x.float().numpy()).T.copy())) <= 1


def case_learned_scores_row_stable(device, dtype):
    """A row scored among 37, alone, or in another order gets bit-equal scores, and equal rows score
    equal (a repeated token at layer 0): what lets the server and the runner agree bit for bit."""
    x, w, b = _scorer_case(2)
    x = x.to(DTYPES[dtype])
    x[5] = x[30]
    w, b = w.to(device), b.to(device)
    run = lambda rows: triton_kernels.learned_scores_into(  # noqa: E731
        rows.to(device), w, b, torch.zeros(rows.shape[0], 3, device=device)).cpu()
    whole = run(x)
    perm = torch.randperm(37, generator=torch.Generator().manual_seed(3))
    assert torch.equal(run(x[perm]), whole[perm]) and torch.equal(run(x[11:12])[0], whole[11])
    assert torch.equal(whole[5], whole[30])


#: every kernel case: id -> (function, keyword arguments)
CASES = {
    **{f"unit_indices-seed{s}-{'views' if v else 'no_views'}": (case_unit_indices, {"seed": s, "with_views": v})
       for s in range(3) for v in (False, True)},
    "unit_indices_into-fixed_buffers": (case_unit_indices_into_fixed_buffers, {}),
    "unit_indices-equal_build_unit_indices": (case_unit_indices_equal_build_unit_indices, {}),
    "unit_indices-empty_batches": (case_unit_indices_of_empty_batches, {}),
    **{f"learned_scores-{d}": (case_learned_scores, {"dtype": d}) for d in DTYPES},
    **{f"learned_scores-row_stable-{d}": (case_learned_scores_row_stable, {"dtype": d}) for d in DTYPES},
}


def run_cases(device: str) -> dict[str, str]:
    """case id -> "ok", "skip: <why>" or the failure's traceback."""
    out = {}
    for name, (fn, kwargs) in CASES.items():
        try:
            fn(device, **kwargs)
            out[name] = "ok"
        except pytest.skip.Exception as e:
            out[name] = f"skip: {e.msg}"
        except Exception:  # noqa: BLE001 -- reported per case
            out[name] = traceback.format_exc()
    return out


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str]:
    """Every case on CPU in one child interpreter with TRITON_INTERPRET=1 from its start."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_interpreted_on_cpu(case, interpreted):
    if interpreted[case].startswith("skip: "):
        pytest.skip(interpreted[case][6:])
    assert interpreted[case] == "ok", interpreted[case]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (bench/gpu_check.sh runs these compiled)")
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_on_cuda(case, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    fn, kwargs = CASES[case]
    fn("cuda", **kwargs)


# -- the wrappers around the kernels (no kernel runs) ---------------------------------------------------
def test_learned_scores_refuse_bad_shapes():
    x, w, b = _scorer_case(0)
    with pytest.raises(ValueError, match="out float32"):
        triton_kernels.learned_scores_into(x, w, b, torch.zeros(37, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="weight"):
        triton_kernels.learned_scores_into(x, w[:-1], b, torch.zeros(37, 3))


def test_without_a_kernel_the_wrappers_run_the_reference(monkeypatch):
    """CPU tensors without the interpreter: the torch reference, same results; the in-place index
    build refuses by name rather than run the reference silently."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not triton_kernels.runs_triton(torch.device("cpu"))
    mapping, r2t, rows, lens = _batch(5)
    for (gp, gi), (wp, wi) in zip(triton_kernels.unit_indices(mapping, r2t, rows, lens),
                                  reference.unit_indices(mapping, r2t, rows, lens)):
        assert torch.equal(gp, wp) and torch.equal(gi, wi)
    x, w, b = _scorer_case(0)
    got = triton_kernels.learned_scores_into(x, w, b, torch.zeros(37, 3))
    assert torch.equal(got, reference.learned_scores(x, w, b))
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        triton_kernels.unit_indices_into(mapping, r2t, rows, lens, torch.zeros(3, 6, dtype=torch.int32),
                                         torch.zeros(3, 10, dtype=torch.int32))


if __name__ == "__main__":  # the child of `interpreted`
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (the test's fixture does)")
    print(json.dumps(run_cases("cpu")))
