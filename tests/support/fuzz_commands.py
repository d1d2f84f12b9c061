"""Runs every reading `ggml-trace` command on trace files, in this one process, each under a
time limit, and prints one JSON line per run: what tests/traces/test_fuzz.py checks. Started by the
test in a subprocess with an address-space cap (RLIMIT_AS), so a blow-up ends here.

usage: fuzz_commands.py SECONDS OUTDIR FILE..."""
import contextlib
import io
import json
import signal
import sys
import time
from pathlib import Path

from ggml_trace.tracer.cli import main


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def runs(path: str, out: Path):
    """(name, argv, output path or None) of every command on one file."""
    yield "summary", ["summary", path], None
    yield "summary-json", ["summary", "--json", path], None
    yield "races", ["races", path], None
    for lenient in (["--lenient"],):
        yield "races-lenient", ["races", *lenient, path], None
        yield "summary-lenient", ["summary", *lenient, path], None
        yield "timeline", ["timeline", *lenient, path, "-o", str(out / "t.html")], out / "t.html"
        yield "report", ["report", *lenient, path, "-o", str(out / "r.html")], out / "r.html"
        yield "export", ["export", *lenient, path, "-o", str(out / "p.json")], out / "p.json"
        yield "parquet", ["export", "--format", "parquet", *lenient, path, "-o", str(out / "pq")], out / "pq"
        # in graph windows (bounded memory), as for a trace larger than memory
        yield "races-windows", ["races", "--windows", "--window-records", "2000", *lenient, path], None
        yield "summary-windows", ["summary", "--windows", *lenient, path], None
        yield "parquet-windows", ["export", "--format", "parquet", "--windows", *lenient, path, "-o",
                                  str(out / "pqw")], out / "pqw"
        yield "snapshot", ["snapshot", path, "-o", str(out / "s.ggmltrace")], out / "s.ggmltrace"


def main_() -> None:
    limit, outdir, files = float(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    signal.signal(signal.SIGALRM, _alarm)
    for i, f in enumerate(files):
        out = outdir / f"out{i}"
        out.mkdir(parents=True, exist_ok=True)
        for name, argv, product in runs(f, out):
            err, t0 = io.StringIO(), time.monotonic()
            rc = None
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                    rc = main(argv)
            except Timeout:
                rc = "timeout"
            except BaseException as e:  # noqa: BLE001 - reported, the test fails on it
                rc = f"raised {type(e).__name__}: {e}"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            left = sorted(p.name for p in out.iterdir() if ".tmp-" in p.name)
            size = None
            if product is not None and product.exists():
                size = (sum(p.stat().st_size for p in product.iterdir()) if product.is_dir()
                        else product.stat().st_size)
            print(json.dumps({"file": i, "run": name, "rc": rc, "seconds": time.monotonic() - t0,
                              "stderr": err.getvalue(), "output_size": size, "leftovers": left}),
                  flush=True)
            if product is not None and product.exists() and not product.is_dir():
                product.unlink()


if __name__ == "__main__":
    main_()
