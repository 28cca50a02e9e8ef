"""``top_n_mask`` in torch (``ops.top_n``: one stable sort of a composite key per row, any device)
against the numpy reference, bit for bit: rows of few distinct values (ties everywhere), NaN,
+-inf, -0.0 beside +0.0, protected tails, ``n`` from below 0 to past the held count. On CUDA too
where torch sees a GPU (``bench/gpu_check.sh``; where its image lacks hypothesis, the property test
skips and the seeded ones still run)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sglang_pask import ops
from sglang_pask.ops import reference
from sglang_pask.ops.top_n import order_keys, top_n_mask_torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
#: few distinct values, so most positions tie with others
VALUES = [np.nan, -np.inf, np.inf, -0.0, 0.0, 1.0, -1.0, 2.5, -2.5, 1e300, -1e-300]


def _run(fn, device, held, scores, n, tail):
    args = [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (held, scores, n, tail)]
    got = fn(*args)
    assert got.dtype == torch.bool and got.shape == held.shape and got.device.type == device
    return got.cpu().numpy()


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError:  # a bare GPU image (bench/gpu_check.sh): requirements/test.txt pins it here
    given = None

if given is not None:
    @st.composite
    def rows(draw):
        R, T = draw(st.integers(1, 6)), draw(st.integers(1, 40))
        held = draw(hnp.arrays(np.bool_, (R, T)))
        scores = draw(hnp.arrays(np.float64, (R, T), elements=st.sampled_from(VALUES)))
        n = draw(hnp.arrays(np.int64, (R,), elements=st.integers(-1, T + 2)))
        tail = draw(hnp.arrays(np.int64, (R,), elements=st.integers(0, T + 1)))
        return held, scores, n, tail

    @pytest.mark.parametrize("device", DEVICES)
    @settings(max_examples=300, deadline=None)
    @given(case=rows())
    def test_sorted_top_n_equals_the_reference(device, case):
        assert np.array_equal(_run(top_n_mask_torch, device, *case), reference.top_n_mask(*case))
else:
    @pytest.mark.skip(reason="hypothesis is not installed")
    def test_sorted_top_n_equals_the_reference():
        pass


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
def test_sorted_top_n_equals_the_reference_on_long_rows(seed, device):
    """Padded rows of up to 5,000 positions, a third dropped, integer scores (ties) with NaN, -inf
    and signed zeros, tails of 0 to 64 positions."""
    rng = np.random.default_rng(seed)
    R, T = int(rng.integers(1, 24)), int(rng.integers(1000, 5000))
    held = rng.random((R, T)) >= 1 / 3
    scores = rng.integers(-3, 4, (R, T)).astype(np.float64) * np.where(rng.random((R, T)) < 0.5, -1.0, 1.0)
    scores[rng.random((R, T)) < 0.03] = np.nan
    scores[rng.random((R, T)) < 0.03] = -np.inf
    n = rng.integers(-1, T + 2, R)
    tail = T - rng.integers(0, 65, R)
    want = reference.top_n_mask(held, scores, n, tail)
    assert np.array_equal(_run(top_n_mask_torch, device, held, scores, n, tail), want)
    assert np.array_equal(_run(ops.top_n_mask_tensor, device, held, scores, n, tail), want)


def test_order_keys_order_as_the_reference_ranks():
    """NaN below -inf below every number; -0.0 and +0.0 one key; a tail position +inf's key; a
    position not held below all."""
    held = torch.tensor([[True] * 7 + [False]])
    scores = torch.tensor([[np.nan, -np.inf, -1.0, -0.0, 0.0, 1e300, 5.0, np.inf]], dtype=torch.float64)
    k = order_keys(held, scores, torch.tensor([6]))[0].tolist()
    assert k[7] < k[0] < k[1] < k[2] < k[3] == k[4] < k[5] < k[6]
    assert k[6] == order_keys(held, torch.full_like(scores, np.inf), torch.tensor([8]))[0, 6].item()


def test_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="held must be bool"):
        top_n_mask_torch(torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, 4), torch.zeros(2), torch.zeros(2))
    assert top_n_mask_torch(torch.ones(0, 3, dtype=torch.bool), torch.zeros(0, 3), torch.zeros(0),
                            torch.zeros(0)).shape == (0, 3)
