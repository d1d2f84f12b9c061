"""Timeline benchmark: build time, HTML size and first render in headless Chromium for
synthetic traces of 10^4, 10^5 and 10^6 timeline intervals (tests/support/tracegen.py synth_trace).

    .venv/bin/python bench/bench_timeline.py [--sizes 1e4,1e5,1e6] [--accesses 4] [--keep DIR]

Columns: intervals drawn on the timeline; load = analysis.load; build = analysis.timeline
(races off); html = write_html (the store is compressed in build); MB = the file; render = ms
from navigation to the end of plotly's first draw (plotly.js parse included); store = ms more
until the page has decoded every interval (zooming refines from then on); zoom = ms for the
page to redraw a view 1/1000 of the trace wide (60 ms of it is the debounce). Targets at 10^6: <= 60 MB, render <= 5000 ms.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.tracegen import synth_trace  # noqa: E402

from ggml_trace import analysis  # noqa: E402

# calls -> timeline intervals in synth_trace: every call on its thread row, plus its
# graph_compute (2/8) on an execution row and its copies (3/8) on a copies row
INTERVALS_PER_CALL = 1 + 5 / 8


def bench_one(n: int, d: Path, browser, accesses: int = 0) -> dict:
    trace_path = d / f"synth-{n}.ggmltrace"
    calls = max(1, round(n / INTERVALS_PER_CALL))
    synth_trace(trace_path, calls * (1 + accesses), accesses_per_call=accesses)
    t0 = time.perf_counter()
    t = analysis.load(trace_path)
    t1 = time.perf_counter()
    fig = analysis.timeline(t, races=False)
    t2 = time.perf_counter()
    out = d / f"synth-{n}.html"
    fig.write_html(out)
    t3 = time.perf_counter()
    row = {"intervals": fig.layout.meta["ggml_trace"]["intervals"], "load_s": t1 - t0,
           "build_s": t2 - t1, "html_s": t3 - t2, "mb": os.path.getsize(out) / 1e6}
    if browser is not None:
        page = browser.open(out.as_uri(), "window.ggmlTraceRendered", timeout=120)
        row["render_ms"] = page.eval("window.ggmlTraceRendered")
        page.eval("window.ggmlTraceTimelines['ggml-trace-timeline'].ready.then(() => 1)",
                  await_promise=True, timeout=120)
        row["store_ms"] = page.eval("performance.now()") - row["render_ms"]
        row["zoom_ms"] = page.eval("""(() => {
          const gd = document.querySelector('.js-plotly-plot'), r = gd._fullLayout.xaxis.range;
          const st = window.ggmlTraceTimelines['ggml-trace-timeline'];
          const m = (r[0] + r[1]) / 2, w = (r[1] - r[0]) / 2000, t = performance.now();
          Plotly.relayout(gd, {'xaxis.range': [m - w, m + w]});
          return new Promise(ok => { const check = () => (st.lastRedraw || 0) > t
            ? ok(st.lastRedraw - t) : setTimeout(check, 5); check(); });
        })()""", await_promise=True, timeout=120)
        problems = page.problems()
        row["errors"] = len(problems)
        page.close()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6")
    ap.add_argument("--keep", help="keep the traces and HTML files in this directory")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--accesses", type=int, default=0,
                    help="byte-range accesses per call (random tensors and offsets: hover "
                         "data that compresses less)")
    args = ap.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    browser = None
    if not args.no_browser:
        from support.browser import CHROMIUM, Browser

        if CHROMIUM:
            browser = Browser()
        else:
            print("no Chromium (apt-get install -y chromium): render times skipped")
    d = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ggml-trace-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in sizes:
            rows.append(bench_one(n, d, browser, args.accesses))
    finally:
        if browser is not None:
            browser.close()
        if not args.keep:
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    cols = [("intervals", "{:>10,}"), ("load_s", "{:>7.2f}"), ("build_s", "{:>8.2f}"),
            ("html_s", "{:>7.2f}"), ("mb", "{:>7.1f}"), ("render_ms", "{:>10.0f}"),
            ("store_ms", "{:>9.0f}"), ("zoom_ms", "{:>8.0f}"), ("errors", "{:>7}")]
    cols = [(c, f) for c, f in cols if any(c in r for r in rows)]
    print(" ".join(f"{c:>{len(f.format(0)) if 'f' in f else 7}}" for c, f in cols))
    for r in rows:
        print(" ".join(f.format(r[c]) for c, f in cols))
    print(f"command: {Path(sys.executable).relative_to(ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable} "
          f"bench/bench_timeline.py --sizes {args.sizes} --accesses {args.accesses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
