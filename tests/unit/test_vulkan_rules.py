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


def test_bounds_inside_a_one_node_write_prove_the_accesses_overlapped(tmp_path):
    # The read ran somewhere inside [520, 580] us; the CPU's one node wrote X from 500 to 600 us:
    # whatever the read's exact time, the write was under way.
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 520 * US, 580 * US, thread=1, obj=a, flags=MARKERS)
    (race,) = findings(analyse(tmp_path, b))
    assert (race["verdict"], race["basis"], race["inverted"]) == ("manifested", "bounds", False)


def test_bounds_of_a_split_of_many_nodes_bound_each_of_its_accesses(tmp_path):
    # The read is one node's of a split of five that ran somewhere inside [520, 580] us: so did
    # the read, inside the one-node write [500, 600] us; a wider bound, from 450 us, proves nothing.
    for lo, verdict in ((520, "manifested"), (450, "undetermined")):
        b = builder()
        a, _ = reuse_graph(b, 7, 0, nodes=5)
        b.call("device_exec", lo * US, 580 * US, thread=1, obj=a, flags=MARKERS)
        (race,) = findings(analyse(tmp_path, b, f"{lo}.trace"))
        assert (race["verdict"], race["basis"]) == (verdict, "bounds"), lo
        assert race["a"]["timing"] == f"marker bounds: it ran somewhere inside [{lo}.0, 580.0] us"
