#!/usr/bin/env bash
# Run a GPU-host job that takes longer than one device call: the first call starts it in a session of
# its own (it outlives the call), every call waits for it up to WAIT seconds and then packs the
# folder the job writes into DEST (the job goes on; the next call waits again and packs again).
# usage: bench/gpu/in_background.sh NAME WAIT FOLDER DEST -- COMMAND...
#   -> DEST/NAME.tar.xz (FOLDER as it is now), DEST/NAME.out (the job's output so far), and the
#      job's exit status in DEST/NAME.rc once it has finished
set -uo pipefail
name=$1 wait=$2 folder=$3 dest=$4; shift 4; [ "${1:-}" = -- ] && shift
state=/tmp/bg-$name
if [ ! -f $state.rc ] && ! { [ -f $state.pid ] && kill -0 "$(cat $state.pid)" 2>/dev/null; }; then
  setsid bash -c '"$@"; echo $? > '"$state.rc" _ "$@" > $state.out 2>&1 < /dev/null &
  echo $! > $state.pid
  echo "started $name (pid $!)"
fi
end=$((SECONDS + wait))
while [ $SECONDS -lt $end ] && [ ! -f $state.rc ]; do sleep 5; done
mkdir -p "$dest"
[ -d "$folder" ] && tar cJf "$dest/$name.tar.xz" -C "$(dirname "$folder")" "$(basename "$folder")"
cp $state.out "$dest/$name.out"
if [ -f $state.rc ]; then cp $state.rc "$dest/$name.rc"; echo "$name finished: exit $(cat $state.rc)"; else echo "$name still running"; fi
tail -40 $state.out
