# Sourced by the GPU-host scripts, from the repository root:   . bench/gpu/install_here.sh || exit 1
# Installs this checkout's package (ggml_trace, its folders mapped as pyproject.toml says) into
# GGML_TRACE_SITE (default /tmp/ggml-trace-site), offline, with PYTHON (default python3), and puts it
# first on PYTHONPATH. Needs pip and setuptools >= 70.1 (or an older one with the wheel package).
# install_tree TREE SITE installs another tree (an earlier commit's, for a side-by-side figure).

install_tree() {  # install_tree TREE SITE
  local work
  work=$(mktemp -d) || return 1
  # setuptools builds in a folder of its own, not in TREE/build: files kept there from an earlier
  # build (a module since removed) would go into the package
  printf '[build]\nbuild_base = %s/build\n[egg_info]\negg_base = %s\n' "$work" "$work" > "$work/setup.cfg"
  rm -rf "$2"
  DIST_EXTRA_CONFIG=$work/setup.cfg "${PYTHON:-python3}" -m pip install -q --no-index --no-deps \
    --no-build-isolation --target "$2" "$1" > "$work/pip.log" 2>&1 \
    || { tail -20 "$work/pip.log" >&2; echo "install_here.sh: could not install $1 into $2" >&2; rm -rf "$work"; return 1; }
  rm -rf "$work"
}

install_tree "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)" "${GGML_TRACE_SITE:=/tmp/ggml-trace-site}" || return 1
export PYTHONPATH=$GGML_TRACE_SITE${PYTHONPATH:+:$PYTHONPATH}
# The scripts run Python from the repository root, whose ggml_trace/ holds only the package's entry:
# first on the path (as the current directory is for -m, -c and stdin), it would hide the install.
export PYTHONSAFEPATH=1
