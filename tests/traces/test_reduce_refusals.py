"""`ggml-trace reduce` on committed traces where it runs no program: a trace without a race is
refused in one line, and the bug-report page offers the reduction."""
from support import DATA, ggml_trace


def test_a_trace_without_a_race_is_refused_in_one_line(tmp_path):
    r = ggml_trace("reduce", DATA / "vulkan-nvidia-b10531-h200.ggmltrace", "-o", tmp_path / "x")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "no race" in r.stderr
    assert not (tmp_path / "x").exists()


def test_the_report_offers_the_reduction(tmp_path):
    page = tmp_path / "r.html"
    r = ggml_trace("report", DATA / "vulkan-nvidia-b10524-h200.ggmltrace", "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert "ggml-trace reduce vulkan-nvidia-b10524-h200.ggmltrace --race 1 -o race-1-repro" in html
    assert "inputless-reuse" in html
