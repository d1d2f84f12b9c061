"""`ggml-trace diagnose` on Vulkan (Mesa's lavapipe): llama.cpp #23321 before its fix."""
import os

from support.diagnose_checks import BUILD, QWEN, QWEN_ARGS, check_issue, check_png, diagnose, needs


def test_the_23321_race_on_lavapipe(tmp_path):
    exe = BUILD / "llama-b10524-vulkan" / "bin" / "llama-completion"
    needs(exe, exe.with_name("libggml-trace-hooks.so"), QWEN)
    out = tmp_path / "diag"
    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")
    r, d = diagnose(out, "--runs", "2", "--force-runs", "1", "--replay-runs", "1", "--max-races", "1",
                    "--device-timing", "--", exe, "-m", QWEN, *QWEN_ARGS, env=env)
    assert r.returncode == 1, r.stderr[-3000:]
    m = d["races"][0]
    assert (m["race"]["a"]["backend"], m["race"]["a"]["tensor"]) == ("Vulkan0", "model.input_embed")
    assert m["reduction"]["expected"]["verdict"] == "RED"  # the reduction on b10524, virtual devices
    check_issue(out / "ISSUE.md", "model.input_embed", "Vulkan0")
    check_png(out / "timeline.png")
