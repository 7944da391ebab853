#!/usr/bin/env bash
# make boot-test: boot the test VM with systemd as PID 1 (stage2-systemd.sh)
# on the host's root, with the ucmd package installed and ucmd.service
# enabled, rdma-core's units and udev rules active and rxe0/rxe1 appearing
# early in boot; then test/vm/guest-boot.sh checks ucmd as such a host runs it.
# BOOT_UNIT=FILE: boot with FILE as ucmd.service (e.g. an older unit).
# Logs: bin/boot-test/ (run/output, run/console.log).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
OUT=bin/boot-test # relative: make deb stages under $(CURDIR)/$(BIN)
rm -rf "$OUT"
mkdir -p "$OUT/run"
make --no-print-directory deb VERSION=1.0.0 BIN="$OUT" >"$OUT/build.log" 2>&1 ||
  { cat "$OUT/build.log" >&2; echo "boot-test: make deb failed" >&2; exit 1; }
test/clients/build.sh "$REPO/$OUT/ucmclient" >>"$OUT/build.log" 2>&1 ||
  { cat "$OUT/build.log" >&2; echo "boot-test: ucmclient build failed" >&2; exit 1; }
echo "UCMD_DEB=$REPO/$OUT/ucmd_1.0.0_$(go env GOARCH).deb" > "$OUT/run/boot.env"
# BOOT_UNIT=FILE boots with FILE as ucmd.service instead of the package's
# (its ExecStart pointed at the package's binary)
if [ -n "${BOOT_UNIT:-}" ]; then
  sed 's|/usr/local/sbin/ucmd|/usr/sbin/ucmd|' "$BOOT_UNIT" > "$OUT/run/ucmd.service"
  echo "UCMD_UNIT=$REPO/$OUT/run/ucmd.service" >> "$OUT/run/boot.env"
fi
rc=0
UCMD_VM_STAGE2=$HERE/stage2-systemd.sh "$HERE/run.sh" -t "${BOOT_TIMEOUT:-400}" -o "$OUT/run" -- \
  env UCMCLIENT_BIN="$REPO/$OUT/ucmclient" "$HERE/guest-boot.sh" || rc=$?
if [ $rc = 0 ]; then echo "boot-test: PASS"; else echo "boot-test: FAIL ($rc); logs in $OUT/run" >&2; fi
exit $rc
