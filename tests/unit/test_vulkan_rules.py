"""The race verdicts' rules for device intervals known only within bounds (Vulkan's markers: the
work started after one marker and ended before another), on traces written by hand; with host
times alone a verdict is never latent. Lavapipe's real runs: tests/external/test_vulkan.py."""
import pandas as pd
import pytest

from support.race_cases import US, analyse, builder, findings, reuse_graph

from ggml_trace.analysis.races import format_report

MARKERS = 2 << 4  # DeviceSource SRC_MARKERS in a device_exec record's flags


def test_markers_prove_manifested_when_the_read_had_not_started(tmp_path):
    # The queue's read of X had not started at 650 us (its before-marker still zero); the CPU's
    # write began at 500 us: the read came after the write began.
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 650 * US, 900 * US, thread=1, obj=a, flags=MARKERS)
    (race,) = findings(analyse(tmp_path, b))
    assert race["verdict"] == "manifested" and race["manifested"] and race["basis"] == "bounds"
    assert race["inverted"]  # the write (500..600 us) ended before the read could start


def test_markers_prove_latent_with_a_margin(tmp_path):
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 10 * US, 380 * US, thread=1, obj=a, flags=MARKERS)
    (race,) = findings(analyse(tmp_path, b))
    assert race["verdict"] == "latent" and not race["manifested"]
    assert race["margin_us"] == pytest.approx(120)  # at least: it ended by 380 us, the write began at 500


def test_bounds_that_straddle_the_write_prove_nothing(tmp_path):
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 10 * US, 550 * US, thread=1, obj=a, flags=MARKERS)
    r = analyse(tmp_path, b)
    (race,) = findings(r)
    assert race["verdict"] == "undetermined" and not race["manifested"] and race["margin_us"] is None
    assert "UNDETERMINED: the device-time bounds" in format_report(r)


def test_host_times_alone_never_say_latent(tmp_path):
    b = builder()
    reuse_graph(b, 7, 0)  # the device's split ran at some unknown time after its enqueue
    r = analyse(tmp_path, b)
    (race,) = findings(r)
    assert race["verdict"] == "undetermined" and race["basis"] == "host"
    out = format_report(r)
    assert "0 latent, 1 undetermined" in out and "host times only" in out
    assert r.findings["verdict"].dtype == pd.CategoricalDtype(["manifested", "latent", "undetermined", "overlapped"])


def test_bounds_inside_the_write_prove_an_overlap_not_an_order(tmp_path):
    # The read ran somewhere inside [520, 580] us, during the CPU's write [500, 600] us, whether the
    # split has one node or five: the operations overlapped; which bytes each touched first is not
    # known. A wider bound, from 450 us, does not even prove the overlap.
    for nodes in (1, 5):
        for lo, verdict in ((520, "overlapped"), (450, "undetermined")):
            b = builder()
            a, _ = reuse_graph(b, 7, 0, nodes=nodes)
            b.call("device_exec", lo * US, 580 * US, thread=1, obj=a, flags=MARKERS)
            (race,) = findings(analyse(tmp_path, b, f"{nodes}-{lo}.trace"))
            assert (race["verdict"], race["basis"], race["manifested"]) == (verdict, "bounds", False), (nodes, lo)
            assert race["a"]["timing"] == f"marker bounds: it ran somewhere inside [{lo}.0, 580.0] us"
