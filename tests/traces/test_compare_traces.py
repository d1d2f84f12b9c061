"""`ggml-trace compare` on a committed trace: one trace with itself differs in nothing, and bad
input (an empty folder, a file that is no trace, a cut trace) is said in one line or warned of."""
from support import DATA, ggml_trace


def test_compare_one_trace_with_itself_and_bad_input(tmp_path):
    path = DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace"
    res = ggml_trace("compare", path, path, "--fail-if-slower", "0")
    assert res.returncode == 0, res.stderr
    assert "wall_ns" in res.stdout and not any(line.rstrip().endswith("*") for line in res.stdout.splitlines())
    res = ggml_trace("compare", path, tmp_path)  # an empty folder
    assert res.returncode == 2 and "no traces there" in res.stderr
    bad = tmp_path / "not-a-trace.ggmltrace"
    bad.write_bytes(b"not a trace at all" * 100)
    res = ggml_trace("compare", path, bad)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    cut = tmp_path / "cut.ggmltrace"  # a program killed early: read, and said
    cut.write_bytes(path.read_bytes()[:200_000])
    res = ggml_trace("compare", path, cut)
    assert res.returncode == 0 and "warning" in res.stderr, res.stderr
