"""The views' model without a browser or a program: the Perfetto export's nesting of slices against
a brute force, and the timeline's arrows and race layer on a hostile trace written here."""
from __future__ import annotations

import numpy as np

from support.view_traces import hostile_trace

from ggml_trace import analysis


def test_nesting_against_brute_force():
    from ggml_trace.analysis.export import nesting

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        track = rng.integers(0, 3, n)
        b = rng.integers(0, 40, n)
        e = b + rng.integers(0, 15, n)
        ok = nesting(track, b, e)
        for i in np.flatnonzero(ok):
            for j in np.flatnonzero(ok & (track == track[i])):
                assert not (b[i] < b[j] < e[i] < e[j])
        if n and len(set(track.tolist())) == 1 and (np.diff(np.sort(b)) > 15).all():
            assert ok.all()  # disjoint intervals are all complete events


def test_arrows_and_race_layer(tmp_path):
    t = analysis.load(hostile_trace(tmp_path / "h.ggmltrace"))
    from ggml_trace.analysis.intervals import IntervalModel

    m = IntervalModel(t)
    ar = m.arrows
    assert sorted(ar["type"].tolist()) == [0, 0, 1]  # 2 submissions -> device, 1 record -> sync
    fig = analysis.timeline(t)
    rep = analysis.races(t).to_json()["races"]
    assert fig.layout.meta["ggml_trace"]["races"] == len(rep) >= 1
    red = [s for s in fig.layout.shapes if s.line and s.line.color == "#E41A1C"]
    assert len(red) >= 3  # both operations outlined, and the link
    no = analysis.timeline(t, races=False)
    assert no.layout.meta["ggml_trace"]["races"] == 0
