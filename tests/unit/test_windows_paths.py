"""How a Windows program's own names of itself map to this machine's (tracer/windows.py): under Wine
drive Z: is the root, both ways; a trace of a Windows program re-runs under Wine (tracer/force.py)."""
import os

import pytest

from ggml_trace.tracer import windows
from ggml_trace.tracer.force import ForceError, Recorded


@pytest.mark.skipif(os.name == "nt", reason="Wine's drive Z: is Linux's")
def test_drive_z_is_the_root_both_ways(tmp_path):
    seen = windows.path_for_program(tmp_path / "a b" / "x.exe")
    assert seen.startswith("Z:\\") and "/" not in seen
    assert windows.host_path(seen) == str((tmp_path / "a b" / "x.exe").resolve())
    assert windows.host_path("C:\\Windows\\x.dll") == "C:\\Windows\\x.dll"  # not this machine's: as it is
    assert windows.host_path("models/m.gguf") == "models/m.gguf"
    # the variable that brought the hooks in is the tracer's, not the program's; another backend's is
    hooks = windows.injection_env(tmp_path / windows.HOOKS_DLL, tmp_path / "t")["GGML_BACKEND_PATH"]
    assert windows.is_injection("GGML_BACKEND_PATH", hooks)
    assert not windows.is_injection("GGML_BACKEND_PATH", "C:\\backends\\ggml-mine.dll")


@pytest.mark.skipif(os.name == "nt", reason="Wine's drive Z: is Linux's")
def test_a_windows_trace_reruns_under_wine_or_says_it_cannot(monkeypatch):
    meta = {"cmdline": "Z:\\opt\\llama\\llama-completion.exe\0-m\0m.gguf\0", "cwd": "Z:\\work",
            "env": "GGML_TRACE_VIRTUAL_DEVICES=1\0", "platform": "windows"}
    monkeypatch.setattr(windows, "wine", lambda: "/usr/bin/wine64")
    rec = Recorded.from_meta(meta, "t.ggmltrace")
    assert rec.argv == ["/usr/bin/wine64", "/opt/llama/llama-completion.exe", "-m", "m.gguf"] and rec.cwd == "/work"
    monkeypatch.setattr(windows, "wine", lambda: None)
    with pytest.raises(ForceError, match="Windows program's trace: .*needs Wine"):
        Recorded.from_meta(meta, "t.ggmltrace")
    linux = Recorded.from_meta(dict(meta, platform="linux", cmdline="/bin/prog\0-x\0", cwd="/w"), "t.ggmltrace")
    assert linux.argv == ["/bin/prog", "-x"] and linux.cwd == "/w"


@pytest.mark.skipif(os.name == "nt", reason="Wine's drive Z: is Linux's")
def test_a_launched_command_puts_the_launcher_and_the_hooks_before_the_program(tmp_path):
    hooks = tmp_path / "bin" / windows.HOOKS_DLL
    cmd = ["/usr/lib/wine/wine64", tmp_path / "app" / "llama-cli.exe", "-m", "m.gguf"]
    assert windows.launched(cmd, hooks) == [
        "/usr/lib/wine/wine64", str(tmp_path / "bin" / windows.LAUNCHER),  # Wine starts it by its Linux path
        windows.path_for_program(hooks), windows.path_for_program(tmp_path / "app" / "llama-cli.exe"), "-m", "m.gguf"]
    with pytest.raises(ValueError, match="no Windows program"):
        windows.launched(["/bin/true"], hooks)
    env = windows.injection_env(hooks, tmp_path / "t.ggmltrace", launched=True)
    assert "GGML_BACKEND_PATH" not in env and env["GGML_TRACE_OUTPUT"].endswith("t.ggmltrace")
