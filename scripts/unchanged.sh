#!/usr/bin/env bash
# Run a command and fail if it changed the checkout: a tracked file modified or deleted, or a file
# created outside the ignored folders (build/, .venv/, ...). The state before is the baseline, so a
# checkout with work in progress can be tested too.
# usage: scripts/unchanged.sh COMMAND...
set -uo pipefail
before=$(git status --porcelain=v1 --untracked-files=all)
"$@"; rc=$?
after=$(git status --porcelain=v1 --untracked-files=all)
if [ "$before" != "$after" ]; then
  echo "the command changed the checkout:" >&2
  diff <(echo "$before") <(echo "$after") | grep '^[<>]' >&2
  exit 1
fi
exit $rc
