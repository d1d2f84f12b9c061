"""One self-contained HTML page about a trace, to attach to a bug report: every race with its
evidence, then the environment, the command that reproduces the trace, summary tables and the
timeline zoomed on the first race (plotly.js embedded: the page works offline).

Every string that comes from the trace (tensor, backend, thread and buffer names, the command
line, meta values) is HTML-escaped: names come from model files and may be hostile.
"""
from __future__ import annotations

import datetime as _dt
import html
import os
import shlex
from pathlib import Path

import pandas as pd

from .build_info import build_info
from .intervals import races_as_list
from .race_report import verdict_words
from .reduction import SHAPES, NotReducible, flat_finding, shape_of
from .stalls import stalls, totals, words as stall_words
from .summary import summarize
from .timeline import timeline, timeline_html


def _e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _table(headers: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{_e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _kv(pairs: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{body}</tbody></table>'


def _argv(trace) -> list[str]:
    cmd = trace.meta.get("cmdline", "")
    return [a for a in cmd.split("\0") if a] if cmd else []


def _ns(ns) -> str:
    return f"{float(ns) / 1e3:,.3f} µs"


# The variables `ggml-trace record` sets from its options (tracer/cli.py, cmd_record), which the
# trace records in its environment (meta "env"): valued options, left out at their default (0);
# the virtual devices' only with --virtual-devices.
VDEV_OPTIONS = {"GGML_TRACE_VIRTUAL_DEVICES": "--virtual-devices", "GGML_TRACE_VDEV_LATENCY_US": "--vdev-latency-us",
                "GGML_TRACE_VDEV_JITTER_US": "--vdev-jitter-us",
                "GGML_TRACE_VDEV_BANDWIDTH_GBPS": "--vdev-bandwidth-gbps", "GGML_TRACE_VDEV_SEED": "--vdev-seed"}
# flags: on where the variable is set to anything but "0" (as the hooks read them)
FLAG_OPTIONS = {"GGML_TRACE_VDEV_ALLREDUCE": "--vdev-allreduce", "GGML_TRACE_VDEV_INTEGRATED": "--vdev-integrated",
                "GGML_TRACE_DEVICE_TIMING": "--device-timing", "GGML_TRACE_CUPTI": "--cupti",
                "GGML_TRACE_START_PAUSED": "--paused"}
RING_VARS = ("GGML_TRACE_RING_SECONDS", "GGML_TRACE_RING_BYTES")
HOST_WRITES = "GGML_TRACE_HOST_WRITES"  # --host-writes MODE, left out at its default (infer)
OPTION_VARS = {*VDEV_OPTIONS, *FLAG_OPTIONS, *RING_VARS, HOST_WRITES}


def _zero(value: str) -> bool:
    """'0', '0.0', '0,0': an option's default."""
    try:
        return all(float(v) == 0 for v in value.split(","))
    except ValueError:
        return False


def _record_command(trace, name: str, argv: list[str]) -> list[str]:
    """The `ggml-trace record` command that reproduces the run: the options its recorded
    environment implies, the program's other recorded variables (through env), its delay rules,
    then the program."""
    meta = trace.meta
    env = dict(v.split("=", 1) for v in meta.get("env", "").split("\0") if "=" in v)
    opts = []
    if not _zero(env.get("GGML_TRACE_VIRTUAL_DEVICES", "0")):
        for var, opt in VDEV_OPTIONS.items():
            if not _zero(env.get(var, "0")):
                opts += [opt, env[var]]
    # older traces lack the variables: their device records say how they were timed
    sources = set(trace.device["source"].astype(str)) if len(trace.device) else set()
    on = {var: env.get(var, "0") not in ("", "0") for var in FLAG_OPTIONS}
    on["GGML_TRACE_DEVICE_TIMING"] |= bool(sources & {"events", "markers"})
    on["GGML_TRACE_CUPTI"] |= meta.get("cupti") == "on"
    # --cupti's value: what the trace recorded (a trace from before the modes recorded every kernel)
    kernels = env.get("GGML_TRACE_CUPTI") == "kernels" or meta.get("cupti.mode", "kernels") == "kernels"
    for var, opt in FLAG_OPTIONS.items():
        if on[var]:
            opts += [opt, "kernels"] if var == "GGML_TRACE_CUPTI" and kernels else [opt]
    if env.get(HOST_WRITES, "infer") not in ("", "infer"):
        opts += ["--host-writes", env[HOST_WRITES]]
    seconds, size = (env.get(v) for v in RING_VARS)
    if seconds:
        opts += ["--ring", seconds] + (["--ring-max", size] if size else [])
    elif size:
        opts += ["--ring", size]
    for rule in filter(None, meta.get("delay.rules", "").split(";")):
        opts += ["--delay", rule]
    # the options set their variables; the rest of the environment goes before the command
    rest = [f"{k}={v}" for k, v in env.items() if k not in OPTION_VARS]
    return (["env", *rest] if rest else []) + ["ggml-trace", "record", *opts, "-o", name, "--", *argv]


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1500px}
h1{font-size:20px} h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;
margin-top:28px} h3{font-size:15px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
thead th{background:#f3f4f7} table.kv th{background:#f7f7f9;font-weight:600;width:200px}
pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
pre{background:#f6f8fa;border:1px solid #e3e3e3;padding:8px;white-space:pre-wrap;
word-break:break-all}
.race{border-left:4px solid #e41a1c;padding:2px 12px;margin:14px 0;background:#fff8f8}
.manifested{color:#b00;font-weight:700} .latent{color:#a60} .ok{color:#2a7}
.muted{color:#777;font-size:12px}
.warnings{border-left:4px solid #e69500;background:#fff8e6;padding:2px 12px;margin:10px 0}
"""


def _gpus(nvml) -> str:
    """The GPUs and their links as NVML described them at capture time ("" without NVML)."""
    if not isinstance(nvml, dict) or not nvml.get("gpus"):
        return ""
    gpus = nvml["gpus"]
    html = (f"<h3>GPUs (NVML: driver {_e(nvml.get('driver', ''))}, CUDA driver API "
            f"{_e(nvml.get('cuda', ''))})</h3>" + _table(
                ["index", "name", "UUID", "PCI bus id", "memory", "max SM clock MHz",
                 "max memory clock MHz", "power limit W"],
                [[g.get("index"), g.get("name"), g.get("uuid"), g.get("pci_bus_id"),
                  f"{(g.get('memory_total') or 0) / 2**30:.1f} GiB", g.get("sm_clock_max_mhz"),
                  g.get("mem_clock_max_mhz"),
                  (g.get("power_limit_mw") or 0) / 1000 if g.get("power_limit_mw") else ""]
                 for g in gpus]))
    links = nvml.get("links") or []
    if links:
        html += _table(["GPU", "GPU", "topology level", "P2P read", "NVLinks up (first GPU)"],
                       [[lk.get("a"), lk.get("b"), lk.get("topology_level"), lk.get("p2p_read"),
                         lk.get("nvlinks_up_on_a")] for lk in links])
    return html


def _delays(trace) -> str:
    """The delays injected on purpose (--delay), each with its target and the stall measured."""
    d = getattr(trace, "delays", None)
    if d is None or len(d) == 0:
        return ""
    from .delay import delay_stalls

    s = delay_stalls(trace)
    rules = trace.meta.get("delay.rules", "").split(";")
    rows = [[r, rules[r] if 0 <= r < len(rules) else "", k, tb, b, g, sp, w, f"{req / 1e3:g}",
             "" if pd.isna(st) else f"{st / 1e3:.1f}", _ns(t)]
            for r, k, tb, b, g, sp, w, req, st, t in zip(
                d["rule"].tolist(), d["target_kind"].astype(object), d["target_backend"].astype(object),
                d["backend"].astype(object),
                d["graph"].astype(object), d["split"].astype(object), d["where"].astype(object),
                d["requested_ns"].tolist(), s["stall_ns"].tolist(), d["t_begin"].tolist())]
    return (f"<h2>Injected delays</h2><p>{len(d)} delay{'s' if len(d) != 1 else ''} injected on purpose "
            "(<code>--delay</code>): <i>queue</i> and <i>stream</i> delays stalled the backend's "
            "queue, <i>host</i> delays held the call back on the host (docs/delay.md); a copy between "
            "two asynchronous backends runs on its source's queue, and a delay before it acts there. The "
            "stall is measured from the device records where there are any.</p>"
            + _table(["rule", "spec", "delayed", "call of", "acted on", "graph", "split", "where",
                      "requested µs", "stall µs", "injected at"], rows))


def _reduce_offer(trace, race: dict, number: int, name: str) -> str:
    """How to turn the race into a reproduction that runs without the model or the GPUs
    (docs/reduce.md), or why it cannot be."""
    try:
        shape = shape_of(flat_finding(race), trace)
    except (NotReducible, KeyError, TypeError, ValueError) as e:
        return f'<p class="muted">No reproduction: {_e(e)}.</p>'
    command = f"ggml-trace reduce {shlex.quote(name)} --race {number} -o race-{number}-repro"
    return (f"<p>A reproduction without the model or the GPUs ({_e(shape.name)}: {_e(SHAPES[shape.name])}), "
            f"for a bug report or a test; <code>ggml-trace replay</code> runs it on any build, RED or GREEN:</p>"
            f"<pre>{_e(command)}</pre>")


def report_html(trace, races=None, report_command: str | None = None) -> str:
    """The report page as a string (see write_report)."""
    meta, header = trace.meta, trace.header
    race_list = races_as_list(trace, races)
    shown = getattr(trace, "display_path", None) or str(trace.path)  # printable, whatever the bytes
    name = os.path.basename(shown)
    argv = _argv(trace)
    t_end = int(max(trace.calls["t_end"].max() if len(trace.calls) else 0,
                    trace.device["t_end"].max() if len(trace.device) else 0))
    try:
        start = _dt.datetime.fromtimestamp(int(header.get("t0_realtime_ns", 0)) / 1e9,
                                           _dt.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        start = ""
    hooks = header.get("hooks_build", "")  # text: trace_file.parse_header decodes it
    out = [f"<!doctype html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
           f"<title>ggml-trace report: {_e(name)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
           f"<h1>ggml-trace report: <code>{_e(name)}</code></h1>"]
    n_man = sum(bool(r.get("manifested")) for r in race_list)
    banner = trace.banner() if hasattr(trace, "banner") else ""
    if banner:  # a damaged, unclosed or empty capture says so before anything else
        out.append(f'<div class="warnings"><p><b>⚠ {_e(banner)}</b></p><ul>'
                   + "".join(f"<li>{_e(w)}</li>" for w in trace.warnings) + "</ul></div>")
    if race_list:
        n_lat = sum(r.get("verdict", "latent") == "latent" and not r.get("manifested") for r in race_list)
        n_ovl = sum(r.get("verdict") == "overlapped" for r in race_list)
        n_und = len(race_list) - n_man - n_lat - n_ovl
        out.append(f'<p class="manifested">{len(race_list)} race'
                   f'{"s" if len(race_list) != 1 else ""} found ({n_man} manifested, '
                   f'{n_lat} latent{f", {n_ovl} overlapped" if n_ovl else ""}'
                   f'{f", {n_und} undetermined" if n_und else ""}).</p>')
    elif banner:
        out.append('<p class="latent">No races found in what was captured (see the warnings '
                   'above).</p>')
    else:
        out.append('<p class="ok">No races found.</p>')

    # races: the finding comes first, then where and how it was recorded
    out.append("<h2>Races</h2>")
    if not race_list:
        out.append("<p>No conflicting accesses without an ordering were found.</p>")
    fields = ["backend", "graph", "split", "kind", "tensor", "node", "thread", "mode",
              "t_begin_us", "t_end_us", "device", "call_id"]
    for i, r in enumerate(race_list, 1):
        manif = bool(r.get("manifested"))
        timing = verdict_words(r)  # what the times prove, never "latent" on host times alone
        rng = r.get("range") or [None, None]
        first, last = r.get("first") or {}, r.get("last") or {}
        out.append(
            f'<div class="race" id="race-{i}"><h3>Race {i}: {_e(r.get("class"))} '
            f'<span class="{"manifested" if manif else "latent"}">{_e(timing)}</span></h3>'
            + _kv([("occurrences", r.get("count")),
                   ("inverted (the later operation ran first)", r.get("inverted", "")),
                   ("buffer", f"{r.get('buffer')} ({r.get('buffer_type', '')}, generation "
                              f"{r.get('generation', '')})"),
                   ("byte range", f"[{rng[0]}, {rng[1]})"),
                   ("first seen", f"graph {first.get('graph')} at {first.get('t_us')} µs"),
                   ("last seen", f"graph {last.get('graph')} at {last.get('t_us')} µs"),
                   ("what is missing", r.get("missing", ""))])
            + _table(["op"] + fields, [[side] + [(r.get(side) or {}).get(f) for f in fields]
                                       for side in ("a", "b")])
            + _reduce_offer(trace, r, i, name)
            + "</div>")

    # host stalls: why the host waited (analysis/stalls.py)
    st = stalls(trace)
    if len(st):
        tot = totals(st)
        top = st.sort_values("blocked_ns", ascending=False, kind="stable").head(10)
        out.append("<h2>Host stalls</h2>" + _kv([
            ("host blocked", f"{_ns(tot['blocked_ns'])} in {tot['calls']} calls (waits {_ns(tot['wait_blocked_ns'])}, "
                             f"synchronous copies {_ns(tot['copy_blocked_ns'])})"),
            ("avoidable (ordered nothing)", f"{_ns(tot['avoidable_blocked_ns'])} in {tot['avoidable_calls']} waits")])
            + _table(["blocked", "where", "what it waited for, and whether anything needed it"],
                     [[_ns(r["blocked_ns"]), r["boundary"], stall_words(r)] for r in top.to_dict("records")]))

    # environment
    info = build_info(meta)
    env = [("llama.cpp build", f"{info['llama_build'] or 'unknown'} (commit {info['llama_commit'] or 'unknown'})"),
           ("ggml version", meta.get("ggml_version", "")),
           ("ggml commit", meta.get("ggml_commit", "")),
           ("hooks build", meta.get("hooks_build", hooks)),
           ("backend API version", meta.get("backend_api_version",
                                            header.get("backend_api_version", ""))),
           ("executable", meta.get("exe", "")), ("working directory", meta.get("cwd", "")),
           ("pid", meta.get("pid", header.get("pid", ""))),
           ("hostname", meta.get("hostname", "")), ("trace started (UTC)", start),
           ("trace length", _ns(t_end)), ("trace file", shown),
           ("format version", header.get("version", ""))]
    known = {"cmdline", "exe", "cwd", "pid", "hostname", "hooks_build", "backend_api_version",
             "ggml_version", "ggml_commit", "nvml", "env", "llama.build_number", "llama.commit",
             "source.build_number", "source.commit"}
    if meta.get("env"):  # NUL-separated KEY=VALUE
        env.append(("environment", " ".join(v for v in meta["env"].split("\0") if v)))
    env += [(f"meta: {k}", v) for k, v in meta.items() if k not in known]
    out.append("<h2>Environment</h2>" + _kv(env))
    b = trace.backends
    out.append("<h3>Backends and devices</h3>" + _table(
        ["index", "name", "device", "description", "type", "async", "events"],
        [[i, n, d, desc, t, a, ev] for i, n, d, desc, t, a, ev in zip(
            b["backend"].tolist(), b["name"].astype(object), b["device_name"].astype(object),
            b["device_description"].astype(object), b["device_type"].astype(object),
            b["has_async"].tolist(), b["has_events"].tolist())]))
    out.append(_gpus(getattr(trace, "nvml", None)))
    th = trace.threads
    out.append("<h3>Threads</h3>" + _table(
        ["thread", "os tid", "name"],
        [[t, o, n] for t, o, n in zip(th["thread"].tolist(), th["os_tid"].tolist(),
                                      th["name"].astype(object))]))

    # command
    out.append("<h2>Command</h2><p>The traced program was run as:</p>"
               f"<pre>{_e(shlex.join(argv)) if argv else '(not recorded)'}</pre>")
    if argv:
        out.append("<p>Recorded with:</p><pre>" + _e(shlex.join(_record_command(trace, name, argv))) + "</pre>")
    if report_command:
        out.append(f"<p>This report: <code>{_e(report_command)}</code></p>")

    # summary
    s = summarize(trace)
    out.append(f"<h2>Summary</h2><p>{_e(s['graphs'])} scheduler graph computes, "
               f"{_e(len(trace.calls))} calls, {_e(len(trace.accesses))} accesses, "
               f"{_e(len(trace.device))} device-side executions.</p>")
    cols = ["name", "splits", "copies_in", "bytes_in", "syncs", "event_records", "event_waits",
            "busy_ns"]
    out.append(_table(cols, [[be[c] for c in cols] for be in s["backends"]]))
    kinds = trace.calls["kind"].value_counts()
    kinds = kinds[kinds > 0]
    out.append("<h3>Calls by kind</h3>" + _table(["kind", "calls"],
                                                 [[k, v] for k, v in kinds.items()]))
    if trace.warnings:
        out.append("<h3>Loader warnings</h3>" + "".join(f"<pre>{_e(w)}</pre>"
                                                        for w in trace.warnings))

    out.append(_delays(trace))

    # timeline
    if race_list:
        r = race_list[0]
        ts = [float((r.get(s) or {}).get(k) or 0) for s in "ab" for k in ("t_begin_us",
                                                                           "t_end_us")]
        lo, hi = min(ts), max(ts)
        pad = max((hi - lo) * 0.4, 20.0)
        zoom = (max(lo - pad, 0.0), hi + pad)
        caption = "The timeline, zoomed on race 1 (drag to zoom, double-click to reset)."
    else:
        zoom, caption = None, "The timeline of the whole trace (drag to zoom)."
    fig = timeline(trace, races=race_list, zoom=zoom, stalls=st,
                   title=_e(f"{name}") + (" — race 1" if race_list else ""))
    out.append(f"<h2>Timeline</h2><p>{_e(caption)}</p>")
    out.append(timeline_html(fig, full_html=False, include_plotlyjs=True,
                             div_id="report-timeline"))
    out.append(f'<p class="muted">Written by ggml-trace on '
               f'{_e(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))}.</p>')
    out.append("</body>\n</html>\n")
    return "\n".join(out)


def write_report(trace, path, races=None, report_command: str | None = None) -> Path:
    """Write the report page for `trace` to `path` (races as for analysis.timeline)."""
    p = Path(path)
    p.write_text(report_html(trace, races=races, report_command=report_command),
                 encoding="utf-8")
    return p


__all__ = ["report_html", "write_report"]
