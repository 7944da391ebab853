#!/usr/bin/env bash
# make interop: wire interop of cmcore with the Linux kernel's CM, in two
# guests (test/vm/run2.sh). Builds on the host: the interop test binary
# (test/interop, tag interop), ucmd, and cmpeer (librdmacm; needs
# librdmacm-dev).
# Guest A runs the kernel CM and cmpeer on request (guestA.sh); guest B runs
# the test binary over hw/umad with ib_cm not loaded (guestB.sh).
#
# Env: INTEROP_FLAGS   extra test flags, e.g. '-test.run=Loss'
#      INTEROP_TIMEOUT per-guest timeout in seconds (default 600)
#      INTEROP_RACE=1  build the test binary and ucmd with the race detector
# Exit status: run2.sh's (0 if both guests exit 0).
# Logs of the last run: bin/interop/run/{A,B}/ (console.log, output, dmesg;
# bin/interop-race/run/ with INTEROP_RACE=1),
# bin/interop/run/B/mads.txt (hex dumps of every MAD B sent and received).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=$REPO/bin/interop
cgo=0 race=() # how the test binary and ucmd are built
if [ "${INTEROP_RACE:-}" = 1 ]; then
  # the race detector needs cgo: these link the host's libc, which the
  # guests share with the host's root
  OUT=$REPO/bin/interop-race cgo=1 race=(-race)
fi

t0=$(date +%s.%N)
# hold the VM lock from the build on, like e2e.sh (run2.sh inherits it)
exec 9>>"${UCMD_VM_LOCK:-/tmp/ucmd-vm.lock}"
if ! flock -n 9; then
  echo "interop: waiting for the VM lock (another VM is running)" >&2
  flock -w "${UCMD_VM_LOCK_WAIT:-3600}" 9 || { echo "interop: VM lock not acquired" >&2; exit 122; }
fi
export UCMD_VM_LOCK_HELD=1
t1=$(date +%s.%N)
mkdir -p "$OUT"
cd "$REPO"
if [ ! -e /usr/include/rdma/rdma_cma.h ]; then
  echo "interop: librdmacm headers missing: apt-get install librdmacm-dev (make vm-setup)" >&2
  exit 123
fi
gcc -O2 -Wall -Wextra -Werror -o "$OUT/cmpeer" test/interop/cmpeer/cmpeer.c -lrdmacm -libverbs
CGO_ENABLED=$cgo go test "${race[@]}" -c -tags interop -o "$OUT/interop.test" ./test/interop
CGO_ENABLED=$cgo go build "${race[@]}" -trimpath -o "$OUT/ucmd" ./cmd/ucmd # the full-stack scenario
test/clients/build.sh "$OUT/ucmclient"                     # its C client (RC data; libibverbs-dev)

vm_timeout=${INTEROP_TIMEOUT:-600}
test_timeout=$((vm_timeout > 120 ? vm_timeout - 60 : vm_timeout / 2))
rm -rf "$OUT/run"
rc=0
# shellcheck disable=SC2086 # INTEROP_FLAGS is a list of flags
"$REPO/test/vm/run2.sh" -t "$vm_timeout" -o "$OUT/run" \
  -a "test/interop/guestA.sh" \
  -b "test/interop/guestB.sh $OUT/interop.test -test.v -test.count=1 -test.timeout=${test_timeout}s ${INTEROP_FLAGS:-}" || rc=$?

wall=$(echo "$(date +%s.%N) $t0 $t1" | awk '{ printf "%.1f s (%.1f s of it waiting for the VM lock)", $1 - $2, $3 - $2 }')
if [ "$rc" = 0 ]; then
  echo "interop: PASS (wall $wall)"
else
  echo "interop: FAIL with status $rc (wall $wall); logs in $OUT/run" >&2
fi
exit "$rc"
