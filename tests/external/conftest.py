"""Tests that need more than Python and the CPU builds: Vulkan (Mesa's lavapipe, the builds'
llama-*-vulkan trees), headless Chromium, Jupyter kernels."""
import pytest

from support.browser import CHROMIUM, Browser


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a module's tests (support.browser)."""
    if CHROMIUM is None:
        pytest.skip("needs Chromium: apt-get install -y chromium")
    b = Browser()
    yield b
    b.close()
