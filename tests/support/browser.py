"""A headless Chromium for the tests and the benchmarks (bench/bench_timeline.py, bench/bench_vs_others.py):
Debian's `chromium` package, driven over the Chrome DevTools protocol on a pipe
(--remote-debugging-pipe; no extra Python packages), and what the tests ask of a page."""
from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

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


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def assert_png(path: Path) -> None:
    """A screenshot was written: a non-empty PNG file."""
    data = Path(path).read_bytes()
    assert len(data) > len(PNG_MAGIC) and data.startswith(PNG_MAGIC), path


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
