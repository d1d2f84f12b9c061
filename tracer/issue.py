"""ISSUE.md: a diagnosis (tracer/diagnose.py) as a GitHub issue body, ready to paste.

A maintainer should get the bug in half a minute: a title, the finding in one sentence, the
ordering that is missing, the outputs seen, the picture, then the details (reproduction commands
and repro.cpp folded away, the environment). Everything that comes from the program, its arguments
or the trace (tensor, backend and file names, output text) is inert here: a code span or a code
block whose fence no backtick run inside can close, one printable line, cut when very long; paths
of this machine are made relative to where the program ran, or cut to their file name.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
from pathlib import Path

from .cli_common import printable
from .outputs import output_of

GITHUB_LIMIT = 65536  # characters of an issue body
NAME_CHARS = 120  # a name longer than this is cut
PREVIEW_BYTES = 400  # of each distinct output
MAX_OUTPUTS = 20  # distinct outputs listed
STDERR_LINES = 12


# -- inert text ------------------------------------------------------------------------------------

def one_line(text, limit: int = NAME_CHARS) -> str:
    """Printable, one line, at most `limit` characters."""
    s = printable(text)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def code(text, limit: int = NAME_CHARS, table: bool = False) -> str:
    """An inline code span: nothing inside is Markdown or HTML (its backtick fence is longer than
    any backtick run inside it); in a table cell a pipe is escaped, which GitHub undoes."""
    s = one_line(text, limit)
    if table:
        s = s.replace("|", "\\|")
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


# what Markdown or HTML could read in prose: emphasis, code, links, tags, entities, tables, strike-
# through, mentions; an underscore only where it can open or close emphasis (not inside a word);
# issue references (#12) and autolinks (http://, www.)
_ACTIVE = re.compile(r"[\\`*\[\]<>&|~@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|#(?=\d)|:(?=//)|(?<=www)\.")


def text(s, limit: int = 400) -> str:
    """Prose from a trace (a sentence naming tensors): one line, Markdown and HTML characters
    escaped, mentions and links defused."""
    return _ACTIVE.sub(lambda m: "\\" + m.group(0), one_line(s, limit))


def block(body: str, lang: str = "") -> str:
    """A fenced code block that nothing inside can close."""
    runs = re.findall(r"`{3,}", body)
    fence = "`" * max(3, max((len(r) for r in runs), default=0) + 1)
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def printable_lines(data: bytes, limit: int) -> str:
    """Bytes of program output as text: at most `limit` bytes, each line printable."""
    cut = data[:limit].decode("utf-8", "replace")
    lines = [printable(line) for line in cut.split("\n")]
    return "\n".join(lines) + ("\n[… cut]" if len(data) > limit else "")


def portable(arg: str, cwd: str) -> str:
    """A path of this machine as something that means the same elsewhere: relative to the program's
    folder when inside it, else its file name; other arguments as they are (`--opt=PATH` too)."""
    opt, eq, value = arg.partition("=") if arg.startswith("-") and "=" in arg else ("", "", arg)
    if not value.startswith("/"):
        return arg
    try:
        rel = os.path.relpath(value, cwd)
    except ValueError:
        rel = ".."
    short = rel if not rel.startswith("..") else Path(value).name
    return opt + eq + short


_ABS = re.compile(r"(?<![\w.~])/(?:[^\s/'\"`]+/)+([^\s/'\"`]*)")


def scrub(s: str, cwd: str) -> str:
    """Free text (a program's output, its error messages) without this machine's absolute paths."""
    home = os.path.expanduser("~")
    s = s.replace(cwd.rstrip("/") + "/", "") if cwd not in ("", "/") else s
    if home not in ("", "/"):
        s = s.replace(home, "~")
    return _ABS.sub(lambda m: "…/" + m.group(1), s)


ARG_CHARS = 500  # an argument longer than this is cut (a prompt, a hostile one)


def command_line(argv: list, cwd: str) -> str:
    """A command as one shell line: paths portable, every argument printable and cut at ARG_CHARS."""
    return " ".join(shlex.quote(one_line(portable(a, cwd), ARG_CHARS)) for a in argv)


PICTURE = ("<!-- drag timeline.png from the diagnosis folder here: GitHub puts the picture in its place -->\n"
           "![the two racing operations (red) and their neighbours on each queue and thread](timeline.png)")


# -- the issue -------------------------------------------------------------------------------------

def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _build_name(d) -> str:
    b = (d.environment or {}).get("build") or {}
    return b.get("llama_build") or b.get("hooks_build") or "an unknown build"


def _devices(d) -> str:
    names = [n for n in (d.environment or {}).get("backends", {}) if n != "CPU"]
    return ", ".join(names) if names else "the CPU alone"


def _op(side: dict) -> str:
    from ..analysis.race_report import describe_op

    return describe_op(side)


def title(d) -> str:
    build = _build_name(d)
    m = main_race(d)
    what = ("Wrong output" if d.differing_runs else "Varying output" if d.outputs > 1
            else "Crash" if any(r.crashed for r in d.runs) else "Hang" if any(r.timed_out for r in d.runs)
            else "Race" if d.races else "No race")
    if m is None:
        n = len(d.runs)
        failed = [r for r in d.runs if r.failed]
        detail = {"No race": "",
                  "Wrong output": f"{len(d.differing_runs)} of {n} runs differ from the reference, no race found",
                  "Varying output": f"{d.outputs} distinct outputs in {n} runs, no race found",
                  "Crash": f"{failed[0].exit if failed else ''} in {len(failed)} of {n} runs",
                  "Hang": f"killed at the time limit in {len(failed)} of {n} runs"}[what]
        if what == "No race":
            same = ", outputs identical to the reference" if d.reference is not None else ""
            return f"No race in {_n(n, 'run')} on {_devices(d)}{same} (llama.cpp {build})"
        return f"{what} on {_devices(d)}: {detail} (llama.cpp {build})"
    a, b = m.race["a"], m.race["b"]
    ta, tb = one_line(a["tensor"] or "host memory", 60), one_line(b["tensor"] or "host memory", 60)
    # that it happened out of order is said only where a trace proves it (verdict "manifested")
    if a["mode"] == "read" and b["mode"] == "write":
        how = f"{_op(b)} {'overwrites' if m.manifested else 'can overwrite'} {ta} before {_op(a)} has read it"
    elif a["mode"] == "write" and b["mode"] == "read":
        how = f"{_op(b)} {'reads' if m.manifested else 'can read'} {tb} before {_op(a)} has written it"
    else:
        how = f"{_op(a)} and {_op(b)} write {ta} with nothing ordering them"
    return f"{what} on {_devices(d)}: {one_line(how, 200)} (llama.cpp {build})"


def main_race(d):
    """The race a report is about: the one that explains the wrong output, else the most frequent
    that manifested, else the most frequent."""
    return next((m for m in d.races if m.number == d.explained_by), None) or \
        next((m for m in d.races if m.manifested), d.races[0] if d.races else None)


def finding(d) -> str:
    """The finding in one sentence (which operations race, and why that explains the output), then
    what the runs showed (**Seen:**)."""
    n = len(d.runs)
    m = main_race(d)
    seen = []
    if d.reference is not None and not d.has_reference:
        seen.append(f"the reference run failed ({text(scrub(d.reference_failed or '', d.cwd))}), so the traced "
                    "runs are compared among themselves only")
    if d.differing_runs:
        seen.append(f"the output differed from the reference in {len(d.differing_runs)} of {n} runs")
    elif d.has_reference and not d.races:
        seen.append(f"{'the run' if n == 1 else f'all {n} runs'} printed the reference's output")
    if d.outputs > 1:
        seen.append(f"{d.outputs} distinct outputs in {n} runs")
    crashed = [r for r in d.runs if r.crashed]
    hung = [r for r in d.runs if r.timed_out]
    if crashed:
        seen.append(f"the program crashed in {len(crashed)} of {n} runs ({crashed[0].exit})"
                    + ("; the reference run crashed too" if d.reference is not None and d.reference.crashed else ""))
    if hung:
        seen.append(f"the program hung in {len(hung)} of {n} runs")
    if m is None:
        said = "; ".join(seen + ["no trace shows a race (unordered conflicting accesses)"])
        return f"{said[0].upper()}{said[1:]}."
    a, b = m.race["a"], m.race["b"]
    act_a = "writes" if a["mode"] == "write" else "reads"
    act_b = "writes" if b["mode"] == "write" else "reads"
    graphs = f"graph {a['graph']}" if a["graph"] == b["graph"] else f"graphs {a['graph']} and {b['graph']}"
    sentence = (f"{text(_op(a))} {act_a} {code(a['tensor'] or 'host memory')} while {text(_op(b))} {act_b} "
                f"{code(b['tensor'] or 'host memory')} over the same bytes, with nothing ordering them")
    if m.explains:
        sentence += f"; this race explains the wrong output: {', and '.join(m.explains)}"
    seen.append(f"the race is in {len(m.runs)} of {n} traces ({graphs} first), manifested in {len(m.manifested_runs)}")
    said = "; ".join(seen)
    return f"{sentence}.\n\n**Seen:** {said[0].upper()}{said[1:]}."


def _outputs(d, folder: Path, previews: bool = True) -> list[str]:
    lines = [f"Compared: {d.compared}."]
    if d.reference is not None and not d.has_reference:
        lines.append("The reference failed (see below): the outputs are the traced runs', compared among "
                     "themselves.")
    everyone = ([d.reference] if d.has_reference else []) + d.runs
    ref_group = d.reference.output_group if d.has_reference and d.reference else None
    rows = ["| output | runs | bytes | exit | vs the reference |", "|---|---|---|---|---|"]
    shown = []
    groups = list(dict.fromkeys(r.output_group for r in everyone))
    for g in groups[:MAX_OUTPUTS]:
        members = [r for r in everyone if r.output_group == g]
        # shown: the reference, else the longest (a run stopped early printed a prefix of it)
        first = next((r for r in members if r is d.reference), max(members, key=lambda r: r.output_bytes))
        names = ", ".join("reference" if r is d.reference else r.name.removeprefix("run-") for r in members[:30])
        names += f" and {len(members) - 30} more" if len(members) > 30 else ""
        label = chr(ord("A") + g) if g < 26 else str(g)
        if ref_group is None:
            versus = "—"
        elif g == ref_group:
            versus = "same"
        else:
            versus = f"differs at byte {first.first_difference}" if first.first_difference is not None else "differs"
        exits = ", ".join(dict.fromkeys(r.exit for r in members))
        rows.append(f"| {label} | {names} | {first.output_bytes} | {text(exits)} | {versus} |")
        data = output_of(folder, first)
        shown.append(f"output {label} ({'the reference' if g == ref_group else first.name}):\n\n"
                     + block(scrub(printable_lines(data, PREVIEW_BYTES), d.cwd), "text"))
    if len(groups) > MAX_OUTPUTS:
        rows.append(f"| … | {len(groups) - MAX_OUTPUTS} more distinct outputs | | | |")
    lines.append("\n".join(rows))
    if previews:
        lines.append("<details><summary>The outputs</summary>\n\n" + "\n\n".join(shown) + "\n\n</details>")
    return lines


def _race_section(d, m, folder: Path) -> list[str]:
    from ..analysis.race_report import verdict_words

    r = m.race
    out = ["### The race"]
    head = "| | backend | operation | graph | split | tensor | access | time (µs since start) |"
    rows = [head, "|---|---|---|---|---|---|---|---|"]
    for side in "ab":
        s = r[side]
        where = "device" if s.get("device") else "host call"
        rows.append(f"| {side} | {code(s['backend'], 40, True)} | {code(s['kind'], 40, True)} | {s['graph']} | "
                    f"{s['split']} | {code(s['tensor'] or 'host memory', 80, True)} | {s['mode']} | "
                    f"{s['t_begin_us']:,.1f} – {s['t_end_us']:,.1f} ({where}) |")
    out.append("\n".join(rows))
    rng = r.get("range") or [0, 0]
    out.append(f"Class {code(r['class'])}: bytes [{rng[0]}, {rng[1]}) of a {code(r['buffer_type'] or 'buffer')} "
               f"buffer; {r['count']} occurrence{'s' if r['count'] != 1 else ''} in {m.run}: "
               f"**{text(verdict_words(r))}**. Found in {len(m.runs)} of {len(d.runs)} runs, manifested in "
               f"{len(m.manifested_runs)} ({', '.join(m.manifested_runs) or 'none'}).")
    out += _evidence(d, m)
    others = [x for x in d.races if x is not m]
    if others:
        out.append("Other races in these traces:\n\n" + "\n".join(
            f"- race {x.number}: {code(x.race['class'])} in {len(x.runs)} of {len(d.runs)} runs, manifested in "
            f"{len(x.manifested_runs)}: {text(x.race['missing'], 300)}" for x in others[:8]))
    return out


def _evidence(d, m) -> list[str]:
    """What forcing and reducing the race showed."""
    out = []
    f = m.force
    if f:
        where = f" (delays injected on the {', '.join(f['delay_where'])})" if f.get("delay_where") else ""
        out.append(f"**Forced** (its earlier operation delayed {f['delay_us']:,.0f} µs, rule {code(f['rule'], 200)}"
                   f"{where}): manifested in {f['manifested_runs']} of {f['runs']} runs; verdict "
                   f"**{f['verdict']}**; the forced runs printed {_forced_words(m.forced_outputs)}.")
        if "host delay cannot reorder" in f.get("message", ""):
            out.append("The hooks could delay it only on the host, which holds the later operation back too: "
                       "forcing cannot reorder them on this backend (docs/force.md).")
    elif m.force_error:
        out.append(f"Not forced: {text(scrub(m.force_error, d.cwd))}.")
    x = m.reduction
    if x:
        e = x.get("expected") or {}
        o = x.get("original") or {}
        out.append(f"**Reduced** ({code(x['shape']['name'])}: {text(x['shape']['what'])}) from graph {o.get('graph')} "
                   f"({o.get('splits')} splits, {o.get('nodes')} nodes) to {x['splits']} splits, {x['nodes']} nodes; "
                   f"replayed on {code(x['build'])} ({'virtual devices' if x['backend'] == 'vdev' else x['backend']}): "
                   f"**{e.get('verdict')}**, {e.get('red_runs')} of {e.get('runs')} runs wrong, the race manifested "
                   f"in {e.get('manifested_runs')}.")
    elif m.reduce_why:
        out.append(f"Not reduced: {text(scrub(m.reduce_why, d.cwd))}.")
    return out


def _forced_words(outputs: list) -> str:
    """'the reference's output (1 of 3), run-2's wrong output (2 of 3)'."""
    words = {"reference": "the reference's output", "new": "a wrong output no traced run printed"}
    counts = {o: outputs.count(o) for o in dict.fromkeys(outputs)}
    return ", ".join(f"{words.get(o, o + chr(39) + 's wrong output')} ({k} of {len(outputs)})" for o, k in counts.items())


def _reference_section(d, folder: Path) -> list[str]:
    """How the reference ended, when it did not end well: its exit and the last lines of its stderr."""
    if d.reference is None or d.has_reference:
        return []
    tail = (folder / d.reference.stderr).read_bytes().decode("utf-8", "replace").splitlines()[-STDERR_LINES:]
    body = scrub("\n".join(one_line(x, 300) for x in tail), d.cwd)
    said = (f"The reference ({'on the CPU alone' if _cpu_alone(d.reference_argv or []) else 'on one device'}, "
            f"untraced) ended with {text(d.reference.exit)}: its output is no reference, and no output here is "
            "called wrong. Give it other arguments with `--reference ARGS`.")
    if not body.strip():
        return ["### The reference failed", f"{said} It wrote nothing to stderr."]
    return ["### The reference failed", f"{said} The last lines it wrote to stderr:", block(body, "text")]


def _crash_section(d, folder: Path) -> list[str]:
    failed = [r for r in d.runs if r.failed]
    if not failed:
        return []
    r = failed[0]
    tail = (folder / r.stderr).read_bytes().decode("utf-8", "replace").splitlines()[-STDERR_LINES:]
    body = scrub("\n".join(one_line(x, 300) for x in tail), d.cwd)
    said = (f"{len(failed)} of {len(d.runs)} runs did not end well ({text(', '.join(dict.fromkeys(x.exit for x in failed)))}); "
            "their traces keep every event recorded before the end.")
    if not body.strip():
        return ["### How it ended", f"{said} {r.name} wrote nothing to stderr."]
    return ["### How it ended", f"{said} The last lines {r.name} wrote to stderr:", block(body, "text")]


def _traces(d) -> list[str]:
    """Each traced run in a row: how it ended, its graphs, races and host stalls (folded away)."""
    def ms(ns):
        return f"{(ns or 0) / 1e6:,.1f}"

    rows = ["| run | ended | s | graphs | races (manifested) | host blocked ms (avoidable) |", "|---|---|---|---|---|---|"]
    for r in d.runs[:MAX_OUTPUTS * 5]:
        found = (f"{len(r.races)} ({sum(x['verdict'] == 'manifested' for x in r.races)})"
                 if not r.analysis_error else "—")
        st = r.stalls or {}
        rows.append(f"| {r.name} | {text(r.exit)} | {r.seconds:.1f} | {r.graphs} | {found} | "
                    f"{ms(st.get('blocked_ns'))} ({ms(st.get('avoidable_blocked_ns'))}) |")
    return ["<details><summary>The traced runs</summary>\n\n" + "\n".join(rows)
            + "\n\nEach trace: `runs/run-N.ggmltrace` (`ggml-trace races`, `stalls`, `summary`, `timeline`).\n\n</details>"]


def _reproduce(d, m, folder: Path, source: bool = True) -> list[str]:
    cmds = ["# this diagnosis again (hooks for another llama.cpp build: ggml-trace build-hooks; docs/building.md)",
            "ggml-trace " + command_line(d.invocation, d.cwd)]
    x = m.reduction if m else None
    if x:
        cmds += ["", "# in the diagnosis folder: the race reduced to a small graph on virtual devices, no model, "
                 "no GPU (exits 1 RED / 0 GREEN)",
                 f"ggml-trace replay {x['directory']} --build {shlex.quote(x['build'])} --runs 20"]
    if m and m.force:
        cmds += ["", "# one run with the race forced (its earlier operation delayed)",
                 f"ggml-trace force runs/{m.run}.ggmltrace --race {m.number_in_run} --runs 3"
                 + (" --expect-output runs/reference.stdout" if d.has_reference else "")]
    parts = ["<details><summary>Reproduce: commands and repro.cpp</summary>", block("\n".join(cmds), "sh")]
    if x and x.get("standalone") and (folder / x["standalone"]).exists():
        src = (folder / x["standalone"]).read_text(errors="replace") if source else "// see repro.cpp in the folder"
        parts += [f"`{x['standalone']}`: the same graph on ggml's public API alone, for your own tree and a real "
                  "device; it compares each run with the CPU's (exit 1 RED, 0 GREEN, 2 no device). In "
                  f"`{x['directory']}/`:",
                  block("c++ -std=c++17 -O2 repro.cpp -I LLAMA/ggml/include -L BUILD/bin -lggml -lggml-base "
                        "-lggml-cpu -Wl,-rpath,BUILD/bin -o repro\n./repro 20", "sh"),
                  block(src, "cpp")]
    elif x and x.get("standalone_why"):
        parts.append(f"No standalone program: {text(scrub(x['standalone_why'], d.cwd))}.")
    parts += ["</details>"]
    return ["\n\n".join(parts)]


def _environment(d) -> list[str]:
    from .. import __version__

    e = d.environment or {}
    b = e.get("build") or {}
    rows = [("llama.cpp", f"{b.get('llama_build') or 'unknown'} (commit {b.get('llama_commit') or 'unknown'})"),
            ("ggml", f"{b.get('ggml_version') or 'unknown'}" + (f" ({b['ggml_commit']})" if b.get("ggml_commit") else "")),
            ("hooks", f"{b.get('hooks_build') or 'unknown'}, backend API {e.get('backend_api') or '?'}"),
            ("backends", "; ".join(f"{k}: {v}" if v else k for k, v in (e.get("backends") or {}).items())),
            ("GPUs (NVML)", ", ".join(map(str, e.get("gpus") or [])) + (f", driver {e['driver']}" if e.get("driver") else "")
             if e.get("gpus") else "none seen"),
            ("virtual devices", " ".join(f"{k}={v}" for k, v in (e.get("virtual_devices") or {}).items()) or "none"),
            ("variables", " ".join(f"{k}={portable(v, d.cwd)}" for k, v in (e.get("env") or {}).items()) or "none"),
            ("system", f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs"),
            ("ggml-trace", __version__)]
    table = ["| | |", "|---|---|"] + [f"| {k} | {code(v, 300, True)} |" for k, v in rows]
    return ["### Environment", "\n".join(table)]


def _run(d) -> list[str]:
    lines = [f"# traced, {_n(len(d.runs), 'run')}", command_line(d.argv, d.cwd)]
    if d.reference is not None:
        alone = _cpu_alone(d.reference_argv)
        lines += [f"# the reference: untraced, {'on the CPU alone' if alone else 'on one device'} ({d.reference.exit})",
                  command_line(d.reference_argv, d.cwd)]
    words = f"Traced with `ggml-trace diagnose` on {text(_devices(d))}."
    vd = (d.environment or {}).get("virtual_devices") or {}
    if vd.get("GGML_TRACE_VIRTUAL_DEVICES"):
        words += (" `VDEV`*N* are ggml-trace's virtual async devices (docs/scenarios.md): stand-ins for GPUs whose "
                  "queue runs each operation later, on the CPU, as an asynchronous GPU backend does (latency "
                  f"{code(vd.get('GGML_TRACE_VDEV_LATENCY_US', '0'), 40)} µs per operation).")
    return ["### What was run", block("\n".join(lines), "sh"), words]


def stream_shapes(d) -> dict:
    """The unordered access patterns inside CUDA splits of every run of diagnosis `d`, by shape (class,
    nodes but for their layer, streams): the first run's finding, and the runs that had it."""
    out: dict = {}
    for r in d.runs:
        for f in r.stream_findings:
            out.setdefault(f["shape"], dict(f, runs=[]))["runs"].append(r.name)
    return out


def _inside_cuda_splits(d) -> list[str]:
    """Accesses that nothing orders between ggml-cuda's streams inside a split (runs recorded with
    --cuda-streams; docs/cuda-streams.md), each in CUDA's words."""
    from ..analysis.stream_races import finding_words

    shapes = stream_shapes(d)
    if not shapes:
        return []
    out = ["### Inside CUDA splits"]
    for k, f in enumerate(shapes.values(), 1):
        out.append(f"{k}. **{f['class']}** in {len(f['runs'])} of {len(d.runs)} runs ({f['pairs']} pair(s) in "
                   f"{f['splits']} split(s) of {f['runs'][0]}):")
        out.append(block("\n".join(finding_words(f)), "text"))
    return out


def _cpu_alone(argv: list) -> bool:
    """Whether a command line selects no device (llama.cpp's `-dev none`)."""
    return any(a in ("-dev", "--device") and b == "none" for a, b in zip(argv, argv[1:])) or "--device=none" in argv


def write_issue(d, folder: Path, compact: bool = False) -> str:
    """ISSUE.md for diagnosis `d`, whose files are in `folder`. Over GitHub's limit, it is written
    again `compact`: without the outputs' text and repro.cpp's source (both are in the folder)."""
    m = main_race(d)
    parts = [f"# {text(title(d), 300)}", f"**Finding:** {finding(d)}"]
    if m is not None:
        parts += ["**Missing ordering:**", block(one_line(m.race["missing"], 600), "text"), PICTURE]
    parts += _run(d)
    parts += ["### Outputs"] + _outputs(d, folder, previews=not compact)
    parts += _reference_section(d, folder)
    parts += _crash_section(d, folder)
    if m is not None:
        parts += _race_section(d, m, folder)
    parts += _inside_cuda_splits(d)
    if m is None and d.status == 0:
        parts.append("### Not covered\n\n" + "\n".join(f"- {w}" for w in d.not_covered))
    parts += _traces(d)
    parts += _reproduce(d, m, folder, source=not compact)
    parts += _environment(d)
    parts.append(f"<sub>Written by ggml-trace diagnose. Attached in the diagnosis folder: timeline.png, report.html "
                 f"(every race with its evidence, the zoomable timeline), the traces (runs/*.ggmltrace; "
                 f"`ggml-trace races FILE`){', the reproduction (' + m.reduction['directory'] + '/)' if m and m.reduction else ''}."
                 "</sub>")
    body = "\n\n".join(parts) + "\n"
    if len(body) > GITHUB_LIMIT and not compact:
        return write_issue(d, folder, compact=True)
    return body
