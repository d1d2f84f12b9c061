"""ggml-trace's loader beside what a user would pick instead, on the same events.

A synthetic trace (tests/support/tracegen.synth_trace: calls and their byte ranges on several threads) is
loaded by `analysis.load`. Its Chrome-trace JSON export (`ggml-trace export --format perfetto`: the
calls as slices) is (1) parsed by Holistic Trace Analysis' `parse_trace_file`, the first step of
every HTA analysis, and (2) opened in the Perfetto UI, offline in headless Chromium through
`ggml-trace view`, until its trace processor answers how many slices it holds. The loaders run in
fresh processes that report their time and peak memory (RSS); for the Perfetto UI the time is from
navigation to the answer and the memory the peak RSS of Chromium's processes, sampled every 50 ms.
HTA (PyPI `holistictraceanalysis`) is installed, without its notebook dependencies, into
build/hta-site the first time (it needs only numpy, pandas and ijson to parse).

    .venv/bin/python bench/bench_vs_others.py [--events 2000000] [--repeat 3] [--no-perfetto]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]
SITE = os.path.join(ROOT, "build", "hta-site")

from peak_rss import PEAK_RSS  # noqa: E402

OURS = """
import json, time
from ggml_trace.analysis import load
t = time.perf_counter()
trace = load({path!r})
took = time.perf_counter() - t
print(json.dumps({{"seconds": took, "rss": {peak},
                   "rows": len(trace.calls) + len(trace.accesses)}}))
"""

HTA = """
import json, logging, sys, time
logging.disable(logging.WARNING)
sys.path.insert(0, {site!r})
from hta.common.trace import parse_trace_file
t = time.perf_counter()
meta, df, symbols = parse_trace_file({path!r})
took = time.perf_counter() - t
print(json.dumps({{"seconds": took, "rss": {peak},
                   "rows": len(df)}}))
"""


def ensure_hta() -> None:
    if os.path.isdir(os.path.join(SITE, "hta")):
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", SITE,
                    "holistictraceanalysis==0.5.0", "ijson"], check=True)


def run(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def chromium_rss(root_pid: int) -> int:
    """RSS of a process and all its descendants (bytes)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def perfetto_ui(trace: str, slices: int) -> dict:
    """Seconds until the Perfetto UI (served offline by `ggml-trace view`) has the trace's
    slices in its trace processor, and Chromium's peak RSS meanwhile."""
    import threading
    import time

    from support.browser import Browser, perfetto_rows

    view = subprocess.Popen([os.path.join(ROOT, ".venv", "bin", "ggml-trace"), "view", trace, "--no-browser"],
                            stderr=subprocess.PIPE, text=True)
    browser = Browser()
    try:
        line = ""
        while "http://" not in line:
            line = view.stderr.readline()
            if not line and view.poll() is not None:
                raise RuntimeError("ggml-trace view ended")
        url = line[line.index("http://"):].split()[0]
        peak, done = [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], chromium_rss(browser.proc.pid))
                time.sleep(0.05)

        threading.Thread(target=sample, daemon=True).start()
        t = time.monotonic()
        page = browser.open(url, "window.app && window.app.trace && window.app.trace.engine", timeout=600)
        n = int(perfetto_rows(page, "select count(*) as n from slice", "n")[0])
        took = time.monotonic() - t
        done.set()
        if n < slices:
            raise RuntimeError(f"the Perfetto UI holds {n} slices of {slices}")
        return {"seconds": took, "rss": peak[0], "rows": n}
    finally:
        browser.close()
        view.terminate()
        view.wait(10)


def main() -> int:
    from support.tracegen import synth_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000, help="calls + accesses")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    ap.add_argument("--no-perfetto", dest="perfetto", action="store_false", help="leave the Perfetto UI out")
    args = ap.parse_args()
    ensure_hta()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "bench.ggmltrace")
        events = synth_trace(trace, args.events, threads=4)
        exported = os.path.join(tmp, "bench.json")
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "ggml-trace"), "export", trace, "--format", "perfetto",
                        "-o", exported], check=True, capture_output=True)
        with open(exported) as f:
            slices = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
        print(f"{events:,} events ({os.path.getsize(trace) / 2**20:.0f} MiB trace); exported: {slices:,} "
              f"slices ({os.path.getsize(exported) / 2**20:.0f} MiB of JSON)")
        ours = min((run(OURS.format(path=trace, peak=PEAK_RSS)) for _ in range(args.repeat)),
                   key=lambda r: r["seconds"])
        hta = min((run(HTA.format(site=SITE, path=exported, peak=PEAK_RSS)) for _ in range(args.repeat)),
                  key=lambda r: r["seconds"])
        ui = perfetto_ui(trace, slices) if args.perfetto else None
    print(f"ggml-trace analysis.load (calls and byte ranges): {ours['seconds']:.2f} s, "
          f"{ours['rows'] / ours['seconds'] / 1e6:.2f} M rows/s, peak RSS {ours['rss'] / 2**20:.0f} MiB")
    print(f"HTA parse_trace_file (the calls, as JSON):       {hta['seconds']:.2f} s, "
          f"{hta['rows'] / hta['seconds'] / 1e6:.2f} M rows/s, peak RSS {hta['rss'] / 2**20:.0f} MiB")
    if ui:
        print(f"Perfetto UI, offline in Chromium (the calls):      {ui['seconds']:.2f} s, "
              f"{ui['rows'] / ui['seconds'] / 1e6:.2f} M slices/s, peak RSS {ui['rss'] / 2**20:.0f} MiB (all of Chromium)")
    for name, other in (("HTA", hta), ("the Perfetto UI", ui)):
        if other:
            print(f"ratio: ggml-trace loads {ours['rows'] / ours['seconds'] / (other['rows'] / other['seconds']):.1f}x "
                  f"the rows per second of {name}, in {ours['rss'] / other['rss']:.2f}x its memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
