#!/bin/sh
# Guest B of `make interop` (run by test/vm/run2.sh): ucmd's side. rxe0 on
# the link to A, ib_cm never loaded, then the interop test binary (built on
# the host by test/interop/run.sh) drives the scenarios, asking A for its
# commands through $UCMD_VM_SHARED (see guestA.sh). Whatever happens, A is
# told to stop at the end.
# Usage: guestB.sh TEST_BINARY [test flags...]
set -u
S=${UCMD_VM_SHARED:?run by test/vm/run2.sh}
HERE=$(cd "$(dirname "$0")" && pwd)
stop() { : > "$S/.stop.tmp" && mv "$S/.stop.tmp" "$S/stop"; }
trap stop EXIT

"$HERE/../vm/guest-net.sh" 192.168.77.2/24 || exit 1
[ ! -d /sys/module/ib_cm ] || { echo "guestB: ib_cm is loaded"; exit 1; }
cd "$HERE" && "$@"
