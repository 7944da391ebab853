#!/usr/bin/env bash
# make e2e: build the e2e tests (test/e2e, tag e2e) and ucmd on the host, then
# run the test binary inside the VM with the RDMA setup (run.sh -r).
#
# Env: E2E=skip     skip, loudly (refused when CI=true: CI never skips)
#      E2E_FLAGS    extra test flags, e.g. '-test.run=Smoke -test.count=3'
#      E2E_TIMEOUT  guest timeout in seconds (default 900)
#      E2E_RACE=1   build ucmd with the race detector: a daemon that saw a
#                   race exits 66, which every test's stop reports
# Exit status: the test binary's, or one of run.sh's (121-126, 130; see there).
# Logs of the last run: bin/e2e/run/{output,console.log,dmesg.txt,scratch/}
# (bin/e2e-race/run/ with E2E_RACE=1).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=$REPO/bin/e2e
cgo=0 race=() # how ucmd is built
if [ "${E2E_RACE:-}" = 1 ]; then
  # the race detector needs cgo: this ucmd links the host's libc, which
  # the guest shares with the host's root
  OUT=$REPO/bin/e2e-race cgo=1 race=(-race)
fi

if [ "${E2E:-}" = skip ]; then
  if [ "${CI:-}" = true ]; then
    echo "e2e: E2E=skip is not allowed in CI: the real-kernel tests must run" >&2
    exit 1
  fi
  echo "e2e: SKIPPED because E2E=skip: nothing was tested in the VM" >&2
  exit 0
fi

# hold the VM lock from the build on: a concurrent `make e2e` in the same
# tree would otherwise replace the binaries this guest is about to run
exec 9>>"${UCMD_VM_LOCK:-/tmp/ucmd-vm.lock}"
if ! flock -n 9; then
  echo "e2e: waiting for the VM lock (another VM is running)" >&2
  w0=$(date +%s)
  flock -w "${UCMD_VM_LOCK_WAIT:-3600}" 9 || { echo "e2e: VM lock not acquired" >&2; exit 122; }
  echo "e2e: got the VM lock after $(($(date +%s) - w0)) s" >&2
fi
t0=$(date +%s.%N)
export UCMD_VM_LOCK_HELD=1
mkdir -p "$OUT"
cd "$REPO"
# the guest runs these from the host filesystem as they are: static, but
# for the race build, whose libc is the host's (shared with the guest)
CGO_ENABLED=$cgo go build "${race[@]}" -trimpath -o "$OUT/ucmd" ./cmd/ucmd
CGO_ENABLED=0 go test -c -tags e2e -o "$OUT/e2e.test" ./test/e2e
# the legacy client (C, libibverbs) the daemon tests drive
test/clients/build.sh "$OUT/ucmclient"
# and its static 32-bit build (no libibverbs; gcc-multilib from make vm-setup)
test/clients/build.sh -m32 "$OUT/ucmclient32"
# the LD_PRELOAD discovery shim (dist/preload)
make --no-print-directory "$OUT/libucmd-sysfs.so"

cd "$REPO/test/e2e" # where `go test` would run the package's tests
vm_timeout=${E2E_TIMEOUT:-900}
# the test timeout fires first, so a hung test still prints its goroutines
test_timeout=$((vm_timeout > 120 ? vm_timeout - 60 : vm_timeout / 2))
rc=0
# the run dir keeps the guest console, the output and $UCMD_VM_SCRATCH
# shellcheck disable=SC2086 # E2E_FLAGS is a list of flags
"$HERE/run.sh" -r -o "$OUT/run" -t "$vm_timeout" -- \
  env UCMD_BIN="$OUT/ucmd" UCMCLIENT_BIN="$OUT/ucmclient" UCMCLIENT32_BIN="$OUT/ucmclient32" UCMD_PRELOAD="$OUT/libucmd-sysfs.so" \
  "$OUT/e2e.test" -test.v -test.count=1 \
  -test.timeout="${test_timeout}s" ${E2E_FLAGS:-} || rc=$?

# On the host, with an independent decoder: tshark reads the capture
# TestTraceCapture left (test/tshark; skipped only when that test did not run)
if [ "$rc" = 0 ] && [ -f "$OUT/run/scratch/trace/expected.json" ]; then
  echo "e2e: tshark on the host: test/tshark on $OUT/run/scratch/trace"
  (cd "$REPO" && TRACE_DIR="$OUT/run/scratch/trace" go test -tags tshark -count=1 -v ./test/tshark/) || rc=$?
fi

wall=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.1f", $1 - $2 }')
case $rc in
  0) echo "e2e: PASS (build + VM: $wall s)" ;;
  123) echo "e2e: FAIL: the test VM cannot run on this machine (see above). Run 'make vm-setup' as root, or set E2E=skip to skip the real-kernel tests explicitly." >&2 ;;
  *) echo "e2e: FAIL with status $rc (build + VM: $wall s)" >&2 ;;
esac
exit "$rc"
