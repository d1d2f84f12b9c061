# make setup: venv, pinned llama.cpp sources, ggml + tools + hooks for each, tiny model (idempotent).
# make demo:  the main job on the embedded default.      make test: the whole test suite.
# make check: lint, types and the tests that need no build (the venv only).   make docs: images, notebooks.
PY        := python3
VENV      := .venv
VPY       := $(VENV)/bin/python
BUILDS    := 10524 10531 11434
BUILD_DIR := build
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Cache hits across clones in other folders: paths under the repo are hashed relative to it.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

LLAMA_STAMPS := $(foreach b,$(BUILDS),$(BUILD_DIR)/llama-b$(b)/.built)
HOOKS        := $(foreach b,$(BUILDS),$(BUILD_DIR)/llama-b$(b)/bin/libggml-trace-hooks.so)
MODEL        := $(BUILD_DIR)/models/tiny-llama.gguf
# what build_hooks.sh compiles: the hooks, and the scenario and test programs built beside them
HOOK_SOURCES := $(wildcard native_hooks/*.cpp native_hooks/*.h scenarios/*.cpp scenarios/*.h tests/programs/*.cpp) CMakeLists.txt
# b10531's ggml with the meta backend's allreduce fix (docs/tensor-parallel.md): ggml only, ~1.5 min
# of CPU cold, ~15 s with ccache warm
PATCHED      := $(BUILD_DIR)/llama-b10531-tpfix/bin/libggml-trace-hooks.so
# b11434's ggml with our fix of the pipeline-parallel race (docs/pipeline-parallel.md), and with the
# blunt alternative it is measured against (every queue drained before every split)
PP_PATCHED   := $(BUILD_DIR)/llama-b11434-ppfix/bin/libggml-trace-hooks.so \
                $(BUILD_DIR)/llama-b11434-slotfix/bin/libggml-trace-hooks.so \
                $(BUILD_DIR)/llama-b11434-ppsync/bin/libggml-trace-hooks.so \
                $(BUILD_DIR)/llama-b11434-inputsfirst/bin/libggml-trace-hooks.so \
                $(BUILD_DIR)/llama-b11434-ubatchsync/bin/libggml-trace-hooks.so
# the same fix under b10531's Vulkan build (lavapipe here): a patched libggml-base beside its programs
VK_PP_PATCHED := $(BUILD_DIR)/llama-b10531-vulkan-ppfix/bin/libggml-trace-hooks.so
# Vulkan builds (run on Mesa's lavapipe here), before and after the fix of llama.cpp #23321
VULKAN_BUILDS := 10524 10531
VK_HEADERS    := $(BUILD_DIR)/vulkan-headers/.done
VK_HOOKS      := $(foreach b,$(VULKAN_BUILDS),$(BUILD_DIR)/llama-b$(b)-vulkan/bin/libggml-trace-hooks.so)
QWEN_MODEL    := $(BUILD_DIR)/models/tiny-qwen35.gguf

# Windows (docs/windows.md): the pinned ggml of these builds cross-built for Windows with MinGW-w64, with
# the hooks, the virtual devices and the test programs, run here under Wine
WIN_BUILDS := 10524 10531 11434
WIN_HOOKS  := $(foreach b,$(WIN_BUILDS),$(BUILD_DIR)/win/llama-b$(b)/bin/ggml-trace-hooks.dll)
# and b10524's llama-completion.exe as llama.cpp's Windows releases lay it out (its backends DLLs it
# loads), the hooks beside it: the #23321 race diagnosed from a Windows llama.cpp program
WIN_RELEASE := $(BUILD_DIR)/win/release-b10524/bin/ggml-trace-hooks.dll
WINE       := /usr/lib/wine/wine64

.PHONY: setup vulkan windows demo check test docs bench clean
# The stamps of fetched and built trees are never deleted as intermediates (that would rebuild all).
.SECONDARY:
setup: $(VENV)/.installed $(LLAMA_STAMPS) $(HOOKS) $(PATCHED) $(PP_PATCHED) $(BUILD_DIR)/llama-b11434/bin/llama-server $(MODEL) $(BUILD_DIR)/.chromium vulkan windows

# glslc, spirv-headers, the Vulkan loader and lavapipe (Debian packages), and Vulkan headers
# new enough for ggml-vulkan (Debian 13's, unpacked under build/vulkan-headers).
vulkan: $(VK_HOOKS) $(VK_PP_PATCHED) $(QWEN_MODEL)

$(VK_HEADERS): scripts/setup_vulkan.sh
	scripts/setup_vulkan.sh $(BUILD_DIR)/vulkan-headers
	touch $@

$(BUILD_DIR)/llama-b%-vulkan/.built: $(BUILD_DIR)/src/llama-b%/.fetched $(VK_HEADERS) scripts/build_llama.sh | $(VENV)/.installed
	TARGETS="llama-simple llama-completion" scripts/build_llama.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp \
	  $(BUILD_DIR)/llama-b$*-vulkan -DGGML_VULKAN=ON -DGGML_RPC=OFF \
	  -DVulkan_INCLUDE_DIR=$(CURDIR)/$(BUILD_DIR)/vulkan-headers/usr/include
	touch $@

# b10524's ggml-vulkan, ggml-cpu, registry and headers are b10531's byte for byte (the #23321 fix is in
# ggml-base): its Vulkan build is b10531's Vulkan libraries with its own ggml-base, libllama and programs
# (scripts/vulkan_sibling.sh checks the sources and builds in full where they differ).
$(BUILD_DIR)/llama-b10524-vulkan/.built: $(BUILD_DIR)/llama-b10531-vulkan/.built $(BUILD_DIR)/llama-b10524/.built scripts/vulkan_sibling.sh
	scripts/vulkan_sibling.sh b10524 b10531
	touch $@

$(BUILD_DIR)/llama-b%-vulkan/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b%-vulkan/.built $(HOOK_SOURCES)
	scripts/build_hooks.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/llama-b$*-vulkan/bin b$*-vulkan

$(QWEN_MODEL): scripts/make_tiny_model.py | $(VENV)/.installed
	mkdir -p $(dir $@)
	$(VPY) scripts/make_tiny_model.py --arch qwen35 $@

# The demo's Python: the package and gguf (which writes the tiny models); the test suite's
# extras (.installed) come on top of it, so that `make demo` does not wait for them.
$(VENV)/.core: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e . 'gguf>=0.10'
	touch $@

$(VENV)/.installed: $(VENV)/.core
	$(VPY) -m pip install --quiet -e '.[dev]'
	touch $@

$(BUILD_DIR)/src/llama-b%/.fetched:
	scripts/fetch_llama.sh $* $(BUILD_DIR)/src/llama-b$*
	touch $@

# ggml alone (base, CPU, RPC): what the hooks and the scenario programs are built against
$(BUILD_DIR)/llama-b%/.ggml: $(BUILD_DIR)/src/llama-b%/.fetched scripts/build_llama.sh | $(VENV)/.core
	TARGETS=ggml scripts/build_llama.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/llama-b$*
	touch $@

# ... and llama.cpp's programs
$(BUILD_DIR)/llama-b%/.built: $(BUILD_DIR)/llama-b%/.ggml
	scripts/build_llama.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/llama-b$*
	touch $@

# the program of b10531 that the demo runs (make demo builds no more than it needs: llama-simple
# needs libllama alone, not llama-completion's common library)
$(BUILD_DIR)/llama-b10531/.demo: $(BUILD_DIR)/llama-b10531/.ggml
	TARGETS=llama-simple scripts/build_llama.sh $(BUILD_DIR)/src/llama-b10531/llama.cpp $(BUILD_DIR)/llama-b10531
	touch $@

$(BUILD_DIR)/llama-b%/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b%/.ggml $(HOOK_SOURCES)
	scripts/build_hooks.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/llama-b$*/bin b$*

$(PATCHED): $(BUILD_DIR)/llama-b10531/.built patches/meta-allreduce-scratch.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	scripts/build_patched.sh b10531 patches/meta-allreduce-scratch.patch tpfix

$(BUILD_DIR)/llama-b11434-ppfix/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b11434/.built patches/pipeline-host-reads.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	scripts/build_patched.sh b11434 patches/pipeline-host-reads.patch ppfix

# and with the fix of the copy-slot race the sweep found as well (docs/census.md): both races fixed
$(BUILD_DIR)/llama-b11434-slotfix/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b11434/.built patches/pipeline-host-reads.patch patches/copy-slot-wait.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	scripts/build_patched.sh b11434 patches/pipeline-host-reads.patch:patches/copy-slot-wait.patch slotfix

$(BUILD_DIR)/llama-b11434-ppsync/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b11434/.built patches/sync-every-split.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	scripts/build_patched.sh b11434 patches/sync-every-split.patch ppsync

$(VK_PP_PATCHED): $(BUILD_DIR)/llama-b10531-vulkan/bin/libggml-trace-hooks.so patches/pipeline-host-reads.patch scripts/build_patched_base.sh
	scripts/build_patched_base.sh b10531 b10531-vulkan patches/pipeline-host-reads.patch ppfix

# MinGW-w64 and Wine (Debian's packages), ggml cross-built (~25 s a build), the hooks beside it, the
# released layout's llama-completion (~4 min), and a Wine prefix of our own (build/wine: the tests use
# it, never the user's ~/.wine)
windows: $(WIN_HOOKS) $(WIN_RELEASE) $(BUILD_DIR)/wine/.ready

$(BUILD_DIR)/.mingw-wine:
	command -v x86_64-w64-mingw32-g++-posix >/dev/null && test -x $(WINE) || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++-mingw-w64-x86-64-posix wine64 >/dev/null)
	mkdir -p $(BUILD_DIR) && touch $@

$(BUILD_DIR)/win/llama-b%/bin/ggml.dll: $(BUILD_DIR)/src/llama-b%/.fetched scripts/windows/cross_ggml.sh scripts/windows/mingw-w64.cmake | $(BUILD_DIR)/.mingw-wine
	scripts/windows/cross_ggml.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/win/llama-b$*
	touch $@

$(BUILD_DIR)/win/llama-b%/bin/ggml-trace-hooks.dll: $(BUILD_DIR)/win/llama-b%/bin/ggml.dll $(HOOK_SOURCES) scripts/windows/cross_hooks.sh
	scripts/windows/cross_hooks.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/win/llama-b$*/bin b$*

$(BUILD_DIR)/win/release-b%/bin/llama-completion.exe: $(BUILD_DIR)/src/llama-b%/.fetched scripts/windows/cross_llama.sh scripts/windows/cross_ggml.sh scripts/windows/mingw-w64.cmake | $(BUILD_DIR)/.mingw-wine
	scripts/windows/cross_llama.sh $(BUILD_DIR)/src/llama-b$*/llama.cpp $(BUILD_DIR)/win/release-b$*
	touch $@

# the hooks and virtual devices built against the same sources, copied beside the program
$(BUILD_DIR)/win/release-b%/bin/ggml-trace-hooks.dll: $(BUILD_DIR)/win/release-b%/bin/llama-completion.exe $(BUILD_DIR)/win/llama-b%/bin/ggml-trace-hooks.dll
	cp -f $(BUILD_DIR)/win/llama-b$*/bin/ggml-trace-vdev.dll $(BUILD_DIR)/win/llama-b$*/bin/ggml-trace-hooks.dll $(BUILD_DIR)/win/release-b$*/bin/

$(BUILD_DIR)/wine/.ready: | $(BUILD_DIR)/.mingw-wine
	mkdir -p $(BUILD_DIR)/wine
	WINEPREFIX=$(CURDIR)/$(BUILD_DIR)/wine WINEDEBUG=-all $(WINE) wineboot -i >/dev/null 2>&1
	touch $@

# b11434's ggml copying a split's user inputs before its other inputs (docs/stalls.md, #28874)
$(BUILD_DIR)/llama-b11434-inputsfirst/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b11434/.built patches/user-inputs-first.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	scripts/build_patched.sh b11434 patches/user-inputs-first.patch inputsfirst

# b11434's llama.cpp synchronizing before every ubatch's set_inputs (docs/integrated.md, #28056):
# a patch to libllama, so this build has its own libllama and llama-completion
$(BUILD_DIR)/llama-b11434-ubatchsync/bin/libggml-trace-hooks.so: $(BUILD_DIR)/llama-b11434/.built patches/ubatch-sync.patch scripts/build_patched.sh $(HOOK_SOURCES) | $(VENV)/.installed
	TARGETS="ggml llama-completion llama-server" scripts/build_patched.sh b11434 patches/ubatch-sync.patch ubatchsync

# llama-server of b11434, one slot on an integrated virtual device: the cross-request leak (docs/integrated.md)
$(BUILD_DIR)/llama-b11434/bin/llama-server: $(BUILD_DIR)/llama-b11434/.built
	TARGETS=llama-server scripts/build_llama.sh $(BUILD_DIR)/src/llama-b11434/llama.cpp $(BUILD_DIR)/llama-b11434
	touch $@  # an unchanged program keeps its time; without this the rule runs every time

# Headless Chromium for the browser tests of the timeline and report pages (Debian's package).
$(BUILD_DIR)/.chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	mkdir -p $(BUILD_DIR) && touch $@

$(MODEL): scripts/make_tiny_model.py | $(VENV)/.core
	mkdir -p $(dir $@)
	$(VPY) scripts/make_tiny_model.py $@

# the #23321 scenario on b10524 and b10531 (ggml and the hooks), and b10531's llama-simple on two virtual devices
demo: $(VENV)/.core $(BUILD_DIR)/llama-b10524/bin/libggml-trace-hooks.so \
      $(BUILD_DIR)/llama-b10531/bin/libggml-trace-hooks.so $(BUILD_DIR)/llama-b10531/.demo $(MODEL)
	$(VPY) -m ggml_trace.tracer.demo

# The tests in tiers, by what they need: tests/unit (no build, no program), tests/traces (committed
# traces), tests/runs (the programs of build/), tests/external (Vulkan, Chromium, Jupyter).
# TEST_JOBS: pytest-xdist workers (many tests wait on programs, so more than the cores pays).
TEST_JOBS ?= 4
LINT := $(VPY) -m ruff check tracer analysis tests bench && $(VPY) -m mypy

check: $(VENV)/.installed
	$(LINT)
	$(VPY) -m pytest -q -n $(TEST_JOBS) tests/unit tests/traces

# The whole suite, which must leave the checkout as it found it (scripts/unchanged.sh); the tests marked
# serial after the others, alone (tests/conftest.py says why).
test: setup
	$(LINT)
	scripts/unchanged.sh sh -c '$(VPY) -m pytest -q -n $(TEST_JOBS) --durations=30 -m "not serial" tests && \
	  $(VPY) -m pytest -q --durations=10 -m serial tests'

# The images under docs/img (screenshots of real traces' pages in headless Chromium) and the
# notebooks, executed with their outputs kept, so that a reader on GitHub sees them.
docs: setup
	GGML_TRACE_DOCS_IMG=$(CURDIR)/docs/img $(VPY) -m pytest -q -m docs_image tests
	$(VPY) scripts/run_notebooks.py notebooks/*.ipynb

bench: setup
	$(BUILD_DIR)/hooks-b10531/bench-writer 200000 1
	BENCH_DIR=$(BUILD_DIR) $(BUILD_DIR)/hooks-b10531/bench-writer 200000 1  # the file on disk, as traces are
	$(BUILD_DIR)/hooks-b10531/bench-writer 200000 1 ring
	$(VPY) bench/bench_load.py
	$(VPY) bench/bench_races.py --events 1000000
	$(VPY) bench/bench_vs_others.py --events 2000000
	$(VPY) bench/bench_stalls.py
	$(VPY) bench/bench_work_delay.py
	$(VPY) bench/bench_lazy.py
	$(VPY) bench/bench_host_writes.py --rounds 5 --words 700
	$(VPY) bench/bench_diagnose.py
	$(VPY) bench/bench_device_timing.py
	$(VPY) bench/bench_stall_figures.py
	$(VPY) bench/bench_pipeline_overlap.py
	$(VPY) bench/bench_sweep.py
	$(VPY) bench/bench_windows.py

clean:
	rm -rf $(BUILD_DIR) $(VENV)
