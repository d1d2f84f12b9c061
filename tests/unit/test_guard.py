"""The tier guard itself (tests/support/guard.py): inside a unit test, starting a program or opening
anything under build/ fails the test, before the program starts or the file is read."""
import subprocess

import pytest

from support.guard import ROOT, TierViolation


def test_a_unit_test_cannot_start_a_program():
    with pytest.raises(TierViolation, match="start no programs"):
        subprocess.run(["true"])


def test_a_unit_test_cannot_read_the_build(tmp_path):
    with pytest.raises(TierViolation, match="do not read build/"):
        open(ROOT / "build" / "models" / "tiny-llama.gguf", "rb")
    (tmp_path / "x").write_text("y")  # its own temporary files are fine
    assert (tmp_path / "x").read_text() == "y"
