"""The compiled operators (csrc/) against their reference (sglang_pask.ops.reference), on random
inputs: identical kept sets and identical pool state. Skipped (with the reason) only where the
extension is not built -- ``make install`` builds it -- and the fallback is checked to say so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from sglang_pask import ops
from sglang_pask.ops import reference

needs_csrc = pytest.mark.skipif(ops.compiled() is None, reason=ops.implementation())
#: the devices the compiled operators are checked on: CUDA too on a GPU machine (bench/gpu_check.sh)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@needs_csrc
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(6))
def test_top_n_mask_equals_the_reference(seed, device):
    """Ties (few distinct scores), -inf and NaN scores, -0.0 beside +0.0 (one value: the tie goes
    to the newer position), n from 0 past the held count, tails of 0-3 positions, a row with
    nothing held: the compiled mask equals the reference bit for bit."""
    rng = np.random.default_rng(seed)
    R, T = int(rng.integers(1, 40)), int(rng.integers(1, 900))
    held = rng.random((R, T)) < rng.uniform(0.05, 1.0)
    held[0] = False if R > 1 and seed % 2 else held[0]
    scores = rng.integers(0, 4, (R, T)).astype(np.float64) + (rng.random((R, T)) if seed > 2 else 0.0)
    scores[rng.random((R, T)) < 0.05] = -np.inf
    scores[rng.random((R, T)) < 0.02] = np.nan
    scores[rng.random((R, T)) < 0.05] = -0.0
    scores[rng.random((R, T)) < 0.05] = 0.0
    n = rng.integers(-1, T + 2, R)
    tail = T - rng.integers(0, 4, R)
    if device == "cpu":
        got = ops.top_n_mask(held, scores, n, tail)
    else:
        got = ops.compiled().top_n_mask(*(torch.from_numpy(np.ascontiguousarray(x)).to(device)
                                          for x in (held, scores, n, tail))).cpu().numpy()
    want = reference.top_n_mask(held, scores, n, tail)
    assert got.dtype == bool and got.shape == (R, T)
    assert np.array_equal(got, want)


@needs_csrc
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
def test_take_slots_equals_the_reference(seed, device):
    """Same slots returned in the same order and the same mapping afterwards, with some ids
    already dropped (mapping 0) and ids in random order."""
    rng = np.random.default_rng(seed)
    U, F = 3, 500
    mapping = torch.from_numpy(rng.integers(0, 50, (U, F)).astype(np.int64))
    ids = torch.from_numpy(rng.permutation(F)[: int(rng.integers(0, F))])
    a, b = mapping.clone().to(device), mapping.clone()
    unit = int(rng.integers(0, U))
    got, want = ops.take_slots(a, unit, ids.to(device)).cpu(), reference.take_slots(b, unit, ids)
    a = a.cpu()
    assert torch.equal(got, want) and torch.equal(a, b)
    assert (a[unit, ids] == 0).all() and torch.equal(a[[u for u in range(U) if u != unit]],
                                                       mapping[[u for u in range(U) if u != unit]])


@needs_csrc
@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_names_the_problem_and_changes_nothing(device):
    with pytest.raises(RuntimeError, match="scores must have held's shape"):
        ops.compiled().top_n_mask(*(t.to(device) for t in (
            torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.float64),
            torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))))
    mapping = torch.arange(1, 6, dtype=torch.long).reshape(1, 5).to(device)
    for bad in (9, -1):  # after a valid id: the valid one is not taken either
        with pytest.raises(RuntimeError, match=f"full id {bad} out of range"):
            ops.compiled().take_slots(mapping, 0, torch.tensor([1, bad], device=device))
        assert mapping.cpu().tolist() == [[1, 2, 3, 4, 5]]
    with pytest.raises(RuntimeError, match="unit 1 out of range"):
        ops.compiled().take_slots(mapping, 1, torch.tensor([0], device=device))


@needs_csrc
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4), (8, 1)])
@pytest.mark.parametrize("seed", range(3))
def test_decode_attention_equals_the_reference(seed, heads, dtype):
    """Random slots (repeats allowed, the padding slot 0 among them), counts from 1 to L, grouped
    query heads: the compiled attention equals the gather + SDPA reference (float accumulation
    both; bf16 within its rounding)."""
    g = torch.Generator().manual_seed(seed)
    (H, HK), D, S, B, L = heads, 24, 60, 5, 17
    q = torch.randn(B, H, D, generator=g).to(dtype)
    kb, vb = (torch.randn(S, HK, D, generator=g).to(dtype) for _ in range(2))
    slots = torch.randint(0, S, (B, L), generator=g)
    counts = torch.randint(1, L + 1, (B,), generator=g)
    counts[0], counts[-1] = 1, L
    got = ops.compiled().decode_attention(q, kb, vb, slots, counts, D ** -0.5)
    want = reference.decode_attention(q, kb, vb, slots, counts, D ** -0.5)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.float(), want.float(), **tol)
    assert got.dtype == dtype and got.shape == (B, H, D)


@needs_csrc
def test_decode_attention_refuses_bad_input_by_name():
    q, kb = torch.zeros(2, 4, 8), torch.zeros(10, 2, 8)
    slots, counts = torch.ones(2, 3, dtype=torch.long), torch.tensor([3, 1])
    run = ops.compiled().decode_attention
    with pytest.raises(RuntimeError, match="a count outside \\[1, 3\\]"):
        run(q, kb, kb, slots, torch.tensor([4, 1]), 1.0)
    with pytest.raises(RuntimeError, match="a count outside"):
        run(q, kb, kb, slots, torch.tensor([0, 1]), 1.0)
    with pytest.raises(RuntimeError, match="a slot outside \\[0, 10\\)"):
        run(q, kb, kb, torch.tensor([[1, 10, 0], [1, 1, 1]]), counts, 1.0)
    with pytest.raises(RuntimeError, match="multiple of the KV heads"):
        run(torch.zeros(2, 3, 8), kb, kb, slots, counts, 1.0)
    with pytest.raises(RuntimeError, match="share one dtype"):
        run(q, kb.double(), kb, slots, counts, 1.0)
    run(q, kb, kb, torch.tensor([[1, 2, 99], [3, -5, 77]]), torch.tensor([2, 1]), 1.0)  # past a count: never read


def test_the_reference_runs_and_says_so_when_forced():
    """``SGLANG_PASK_OPS=reference``: the reference runs, and implementation() says why."""
    code = ("from sglang_pask import ops; import numpy as np; assert ops.compiled() is None; "
            "print(ops.implementation()); "
            "print(ops.top_n_mask(np.ones((1, 3), bool), np.zeros((1, 3)), np.array([2]), np.array([3])).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "SGLANG_PASK_OPS": "reference"}).stdout
    assert out.splitlines() == ["torch reference (SGLANG_PASK_OPS=reference)", "[[False, True, True]]"]


@needs_csrc
def test_implementation_names_the_library():
    assert ops.implementation().startswith("csrc _pask_ops") and "(CPU" in ops.implementation()


def test_a_build_without_a_compiler_falls_back_and_says_so(tmp_path):
    """setup.py's build step with no working compiler exits 0, builds nothing, and prints that
    the torch reference runs (what a machine without g++ gets from ``make install``)."""
    shutil.copy(ROOT / "setup.py", tmp_path)
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    (tmp_path / "python" / "sglang_pask").mkdir(parents=True)
    (tmp_path / "python" / "sglang_pask" / "__init__.py").write_text("")
    shutil.copy(ROOT / "python" / "sglang_pask" / "environ.py", tmp_path / "python" / "sglang_pask")  # read by setup
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "CC": "/bin/false", "CXX": "/bin/false"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "sglang_pask: csrc not built (" in res.stderr and "the torch reference runs" in res.stderr
    assert not list(tmp_path.rglob("*.so"))
