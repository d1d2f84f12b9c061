"""The loader on the committed traces (tests/data: real CUDA and Vulkan runs): frames are built when
first touched, and are the same whichever is asked first."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from support import DATA

from ggml_trace.analysis import load
from ggml_trace.analysis.load import FRAME_NEEDS

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

GPU_TRACES = sorted(DATA.glob("*.ggmltrace"))


@pytest.mark.parametrize("path", GPU_TRACES[:6], ids=lambda p: p.stem)
def test_frames_are_built_when_first_touched_and_the_same_in_any_order(path):
    t = load(path)
    assert not any(name in vars(t) for name in FRAME_NEEDS)  # load read the records, built no frame
    _ = t.splits
    built = {name for name in FRAME_NEEDS if name in vars(t)}
    assert "splits" in built and "copies" in built and "accesses" not in built  # copies resolve their own
    forward = t.frames()
    backward = load(path)
    for name in reversed(list(FRAME_NEEDS)):
        pd.testing.assert_frame_equal(getattr(backward, name), forward[name], check_exact=True)
    copied = pickle.loads(pickle.dumps(load(path)))  # a copy carries every frame
    for name in FRAME_NEEDS:
        pd.testing.assert_frame_equal(getattr(copied, name), forward[name], check_exact=True)
    rows = t.access_calls()
    ids = t.calls["call_id"].to_numpy(np.uint64)
    has = rows >= 0
    assert (ids[rows[has]] == t.accesses["call_id"].to_numpy(np.uint64)[has]).all()
    assert (load(path).access_calls() == rows).all()  # asked first, before any frame
    # an analysis of the accesses reads their own columns, never built the whole frame for them
    fresh = load(path)
    own = fresh.access_columns()
    assert "accesses" not in vars(fresh) and list(own.columns) == ["buffer", "offset", "size", "end", "mode", "tensor", "node"]
    pd.testing.assert_frame_equal(own, t.accesses[list(own.columns)], check_exact=True)
    pd.testing.assert_frame_equal(fresh.accesses, t.accesses, check_exact=True)  # the frame built after them
    # each access's lifetime as the load matched it: its buffer's pointer, registered by then
    lt = fresh.access_lifetimes()
    has = lt >= 0
    bf = t.buffers
    assert (bf["buffer"].to_numpy(np.uint64)[lt[has]] == t.accesses["buffer"].to_numpy(np.uint64)[has]).all()
    assert (bf["first_seen"].to_numpy(np.int64)[lt[has]] <= t.accesses["t_end"].to_numpy(np.int64, na_value=2**62)[has]).all()
