"""The loader against the C++ side, compiled here: the record layouts as the compiler lays out
native_hooks/trace_format.h, and files written by the real writer (native_hooks/trace_writer.cpp),
closed cleanly or crashed."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from support import ROOT, col

from ggml_trace.analysis import load
from ggml_trace.analysis.trace_format import CHUNK_SIZE, HEADER_SIZE

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

STRUCTS = {"FileHeader": "FILE_HEADER_DTYPE", "ChunkHeader": "CHUNK_HEADER_DTYPE",
           "StringRec": "STRING_DTYPE", "MetaRec": "META_DTYPE", "ClockRec": "CLOCK_DTYPE",
           "ThreadRec": "THREAD_DTYPE", "BackendRec": "BACKEND_DTYPE",
           "BufferRec": "BUFFER_DTYPE", "CallRec": "CALL_DTYPE", "AccessRec": "ACCESS_DTYPE",
           "GpuActivityRec": "GPU_DTYPE", "SampleRec": "SAMPLE_DTYPE", "NestRec": "NEST_DTYPE",
           "CudaCallRec": "CUDA_DTYPE"}


def test_dtypes_match_c_header(tmp_path):
    """Every numpy field sits at the offset and has the size the C compiler gives it."""
    from ggml_trace.analysis import trace_format

    # every record type's dtype is among those checked: a new record type needs its row in STRUCTS
    checked = [getattr(trace_format, name) for name in STRUCTS.values()]
    assert all(any(dt is c for c in checked) for dt in trace_format.RECORD_DTYPES.values())
    cxx = shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler")
    header = ROOT / "native_hooks" / "trace_format.h"
    lines, want = [], []
    for struct, name in STRUCTS.items():
        dt = getattr(trace_format, name)
        lines.append(f'printf("{struct} %zu\\n", sizeof({struct}));')
        want.append(f"{struct} {dt.itemsize}")
        for field, (fdt, off) in dt.fields.items():
            lines.append(f'printf("{struct}.{field} %zu %zu\\n", offsetof({struct}, {field}), '
                         f'sizeof((({struct} *) 0)->{field}));')
            want.append(f"{struct}.{field} {off} {fdt.itemsize}")
    src = tmp_path / "layout.cpp"
    src.write_text(f'#include <cstdio>\n#include <cstddef>\n#include "{os.path.abspath(header)}"\n'
                   "using namespace ggml_trace;\nint main() {\n" + "\n".join(lines) + "\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cxx, "-std=c++17", "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert got[:-1] == want


WRITER_MAIN = r"""
#include "trace_writer.h"
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
using namespace ggml_trace;

static void calls(int n, const char * name) {
    uint64_t name_id = intern(name);
    for (int i = 0; i < n; i++) {
        emit_record<CallRec>(REC_CALL, [&](CallRec & r) {
            r.kind = 16;  // K_GRAPH_COMPUTE
            r.sched = 0;
            r.thread = thread_index();
            r.t_begin = now_ticks();
            r.call_id = next_call_id();
            r.backend = r.backend2 = NONE32;
            r.graph = (uint32_t) i;
            r.split = 0;
            r.obj = name_id;
            r.arg = (uint64_t) i;
            r.t_end = now_ticks();
        });
    }
}

int main(int argc, char ** argv) {
    if (!writer_open(argv[1], "b-test", 2)) return 1;
    write_meta("model", "tiny.gguf", 9);
    std::string long_name(300, 'x');
    long_name += "<end>";
    std::thread worker(calls, 3000, long_name.c_str());
    calls(2000, "main-calls");
    worker.join();
    if (argv[2][0] == 'a') abort();  // crash: no trim, no final CLOCK record
    writer_close();
    return 0;
}
"""


@pytest.mark.parametrize("ending", ["close", "abort"])
def test_cpp_writer_interop(tmp_path, ending):
    """A trace written by the real C++ writer (closed cleanly, or crashed) loads completely."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler")
    hooks = str(ROOT / "native_hooks")
    (tmp_path / "main.cpp").write_text(WRITER_MAIN)
    exe = tmp_path / "writer"
    subprocess.run([cxx, "-std=c++17", "-O1", "-pthread", "-I", hooks, str(tmp_path / "main.cpp"),
                    os.path.join(hooks, "trace_writer.cpp"), os.path.join(hooks, "platform_posix.cpp"), "-o", str(exe)],
                   check=True)
    path = tmp_path / "w.ggmltrace"
    started = time.monotonic_ns()
    subprocess.run([str(exe), str(path), ending[0]], check=False, capture_output=True)
    ran_ns = time.monotonic_ns() - started  # the writer's t0 and every call fall inside this
    if ending == "abort":  # the pre-extended (fallocated) segment stays: zero chunks
        assert os.path.getsize(path) > HEADER_SIZE + 10 * CHUNK_SIZE
    t = load(path)
    assert t.meta["model"] == "tiny.gguf"
    assert t.header["hooks_build"] == "b-test"
    c = t.calls
    assert len(c) == 5000 and c["call_id"].is_unique
    names = c.groupby("thread")["obj"].first()
    assert sorted(c["thread"].value_counts().tolist()) == [2000, 3000]
    assert {t.strings[int(i)] for i in names} == {"main-calls", "x" * 300 + "<end>"}
    assert (c["duration"] >= 0).all() and (c["t_begin"] >= 0).all()
    assert c["t_end"].max() <= ran_ns  # ticks converted to ns since t0, not raw ticks
    assert col(t.threads, "thread") == [0, 1]
