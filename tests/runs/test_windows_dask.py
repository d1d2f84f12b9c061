"""The windowed race analysis on a local Dask cluster started in this process gives the findings
of the local windows (the command's --dask: tests/traces/test_windows.py)."""
from ggml_trace.analysis.windows import races_in_windows, races_on_dask


def test_dask_local_cluster_gives_the_same_findings(windows_trace):
    path, _ = windows_trace
    local, _ = races_in_windows(path, records=50_000)
    on_dask, info = races_on_dask(path, records=50_000)
    assert info["windows"] >= 4
    assert on_dask.findings.equals(local.findings)
