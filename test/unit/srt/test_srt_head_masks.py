"""srt/attention/head_masks: a per-KV-head selection's state per request row and unit, read by attention
(which keys each KV head reads) and by the next view (``CacheView.head_mask``)."""

import numpy as np
import pytest
import torch
from sglang_pask.srt.attention import head_masks


@pytest.fixture(autouse=True)
def _clean():
    head_masks.masks().clear()
    yield
    head_masks.masks().clear()


def test_allow_follows_the_selection_and_later_positions_are_every_heads():
    kept = np.array([0, 3, 5, 9], dtype=np.int64)
    mask = np.array([[True, False, True, True], [True, True, False, True]])
    head_masks.store(4, 1, kept, mask)
    assert head_masks.masked([2, 4]) and not head_masks.masked([2, 3])
    assert head_masks.allow(4, 0, torch.tensor([0, 3])) is None  # another unit: no selection
    got = head_masks.allow(4, 1, torch.tensor([0, 3, 5, 9, 10, 11]))  # 10, 11: decoded since
    want = np.array([[1, 0, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(got.numpy(), want)
    # after a later drop of 3, the view's mask covers what is still held
    np.testing.assert_array_equal(head_masks.view_mask(4, 1, np.array([0, 5, 9, 10])),
                                  np.array([[1, 1, 1, 1], [1, 0, 1, 1]], dtype=bool))


def test_a_mask_hiding_nothing_clears_the_unit_and_forget_clears_the_row():
    kept = np.array([1, 2], dtype=np.int64)
    head_masks.store(0, 0, kept, np.array([[True, False], [True, True]]))
    head_masks.store(0, 0, kept, np.ones((2, 2), bool))
    assert head_masks.allow(0, 0, torch.tensor([1, 2])) is None
    head_masks.store(0, 1, kept, np.array([[True, False], [True, True]]))
    head_masks.forget(0)
    assert not head_masks.masked([0]) and head_masks.view_mask(0, 1, kept) is None
    with pytest.raises(ValueError, match="head mask of shape"):
        head_masks.store(0, 0, kept, np.ones((2, 3), bool))
