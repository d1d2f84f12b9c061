"""bench/setup_times.py's reading of a `make --trace` log and of pytest's --durations lines."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("setup_times", ROOT / "bench" / "setup_times.py")
setup_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(setup_times)

# a cold `make --trace demo` cut short: the venv, a fetch ("does not exist"), a ggml build whose CMake
# sub-makes trace their own targets (one in a file also called Makefile), then the demo's recipe
LOG = """\
100.000000000 Makefile:82: update target '.venv/.core' due to: pyproject.toml
100.000100000 python3 -m venv .venv
130.500000000 touch .venv/.core
130.500000000 Makefile:92: target 'build/src/llama-b10524/.fetched' does not exist
130.600000000 scripts/fetch_llama.sh 10524 build/src/llama-b10524
140.000000000 Makefile:97: update target 'build/llama-b10524/.ggml' due to: build/src/llama-b10524/.fetched
141.000000000 gmake[1]: Entering directory '/work/main/build/src/llama-b10524/cmake-llama-b10524'
141.100000000 Makefile:1083: target 'cmake_check_build_system' does not exist
141.200000000 Makefile:182: update target 'ggml' due to: cmake_check_build_system
141.300000000 gmake[2]: Entering directory '/work/main/build/src/llama-b10524/cmake-llama-b10524'
150.000000000 ggml/src/CMakeFiles/ggml-base.dir/build.make:245: update target 'ggml.c.o' due to: ggml.c
160.000000000 gmake[2]: Leaving directory '/work/main/build/src/llama-b10524/cmake-llama-b10524'
230.000000000 gmake[1]: Leaving directory '/work/main/build/src/llama-b10524/cmake-llama-b10524'
240.000000000 Makefile:210: update target 'demo' due to: target is .PHONY
250.000000000 clean: the race found and explained
"""


def lines(text=LOG):
    return [setup_times.parse_line(line) for line in text.splitlines()]


def test_each_top_level_recipe_runs_until_the_next_and_sub_makes_count_as_theirs():
    times = setup_times.target_times(lines())
    assert times == pytest.approx({".venv/.core": 30.5, "build/src/llama-b10524/.fetched": 9.5,
                                   "build/llama-b10524/.ggml": 100.0, "demo": 10.0})
    assert "ggml" not in times and "cmake_check_build_system" not in times


def test_a_run_s_own_start_and_end_count():
    """Run by the script: make's reading before the first recipe is its own row; the last recipe lasts
    until make ended, after its last line."""
    times = setup_times.target_times(lines(), start=99.0, end=260.0)
    assert times[setup_times.BEFORE] == pytest.approx(1.0)
    assert times["demo"] == pytest.approx(20.0)
    assert sum(times.values()) == pytest.approx(161.0)


def test_a_log_file_read_and_tabled(tmp_path):
    log = tmp_path / "demo.log"
    log.write_text(LOG)
    times = setup_times.target_times(setup_times.read_log(log))
    out = setup_times.table(times, "make target", min_minutes=1.0, total=150.0).splitlines()
    assert out[1].split() == ["build/llama-b10524/.ggml", "1.7", "66.7%"]
    assert out[2].split()[:2] == ["3", "others,"] and out[2].endswith("0.8   33.3%")
    assert out[-1].split() == ["total", "2.5"]


DURATIONS = """\
============================= slowest 30 durations =============================
95.12s call     tests/runs/test_sweep.py::test_quick_sweep
60.00s setup    tests/runs/test_views_recorded.py::test_timeline[demo]
30.50s setup    tests/runs/test_views_recorded.py::test_report
12.00s setup    tests/external/test_vulkan.py::test_lavapipe
1.25s teardown tests/runs/test_sweep.py::test_quick_sweep
(52 durations < 0.005s hidden.  Use -vv to show these durations.)
412 passed, 3 skipped in 640.21s (0:10:40)
"""


def test_pytest_set_ups_summed_by_module():
    found = setup_times.durations(DURATIONS.splitlines())
    assert len(found) == 5 and found[0] == (95.12, "call", "tests/runs/test_sweep.py::test_quick_sweep")
    assert setup_times.setup_by_module(found) == pytest.approx({"tests/runs/test_views_recorded.py": 90.5,
                                                                 "tests/external/test_vulkan.py": 12.0})
