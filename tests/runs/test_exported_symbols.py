"""What the preloaded libraries export. Preloaded, each exported symbol of theirs comes before the
program's own in every lookup of the process: a name the program's ggml (or a fork's) also defines
would bind its calls to ours. So they export the ggml entry points they interpose, on purpose, and
otherwise only names prefixed ggmltrace_ (a llama.cpp fork's tracer exports ggml_trace_close from
ggml-base: that prefix is not ours to take)."""
import re
import subprocess
from pathlib import Path

import pytest

from support import BUILDS
from ggml_trace.tracer import api, programs

PREFIX = "ggmltrace_"

# The ggml entry points each library interposes, by name (hooks.cpp; vdev_library.cpp)
INTERPOSED = {
    "libggml-trace-hooks.so": {
        "ggml_backend_sched_new", "ggml_backend_sched_free", "ggml_backend_sched_graph_compute",
        "ggml_backend_sched_graph_compute_async", "ggml_backend_sched_alloc_graph", "ggml_backend_sched_reserve",
        "ggml_backend_sched_synchronize", "ggml_backend_sched_reset", "ggml_backend_dev_init",
        "ggml_backend_buffer_free",
    },
    "libggml-trace-vdev.so": {
        "ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_reg_count", "ggml_backend_reg_get",
        "ggml_backend_reg_by_name", "ggml_backend_dev_by_name", "ggml_backend_dev_by_type",
        "ggml_backend_init_by_name", "ggml_backend_init_by_type", "ggml_backend_init_best", "ggml_backend_load_all",
        "ggml_backend_load_all_from_path",
    },
}
# The project's own names that the other side looks up at run time: tracer/api.py (ctypes), the
# virtual devices and the hooks (observer_api.h)
OWN = {
    "libggml-trace-hooks.so": {
        "ggmltrace_active", "ggmltrace_start", "ggmltrace_stop", "ggmltrace_flush", "ggmltrace_mark",
        "ggmltrace_now", "ggmltrace_range", "ggmltrace_output_path", "ggmltrace_close",
        "ggmltrace_backend_index", "ggmltrace_current_call", "ggmltrace_device_exec",
    },
    "libggml-trace-vdev.so": {"ggmltrace_vdev_delay", "ggmltrace_vdev_setup"},
}
GGML_LIBRARIES = ["libggml-base.so", "libggml-cpu.so", "libggml.so", "libggml-rpc.so"]


def exported(lib) -> set[str]:
    """The defined symbols of a shared library's dynamic symbol table (what the process sees)."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("name", sorted(INTERPOSED))
def test_a_preloaded_library_exports_only_interposed_entry_points_and_prefixed_names(build, name):
    names = exported(programs.program(build, name))  # (missing: says to run `make setup`)
    stray = sorted((n for n in names if n not in INTERPOSED[name] and not n.startswith(PREFIX)),
                   key=lambda n: (n.startswith("_Z"), n))  # C names first: those are the ones that clash
    assert stray == [], f"{name} exports names that are neither interposed nor prefixed {PREFIX}: {stray[:20]}"
    # nothing the other side looks up was hidden with the rest
    assert INTERPOSED[name] | OWN[name] <= names, sorted(INTERPOSED[name] | OWN[name] - names)


def test_the_python_control_api_looks_up_the_hooks_names():
    """tracer/api.py finds the control functions by name (ctypes): each is one the hooks export."""
    asked = set(re.findall(r'"(ggml\w*trace_\w+)"', Path(api.__file__).read_text()))
    assert asked and asked <= OWN["libggml-trace-hooks.so"], sorted(asked - OWN["libggml-trace-hooks.so"])


@pytest.mark.parametrize("build", BUILDS)
def test_the_prefix_is_free_in_ggml_and_the_interposed_names_are_ggml_s(build):
    """Of the build's own ggml, no symbol has the prefix, and every interposed name is one it defines."""
    ggml = exported(programs.program(build, "libggml-base.so"))  # (missing: says to run `make setup`)
    for lib in GGML_LIBRARIES[1:]:
        path = programs.bin_dir(build) / lib
        if path.exists():
            ggml |= exported(path)
    assert "ggml_backend_sched_new" in ggml
    assert not [n for n in ggml if n.startswith(PREFIX)]
    for name, interposed in INTERPOSED.items():
        assert interposed <= ggml, (name, sorted(interposed - ggml))
