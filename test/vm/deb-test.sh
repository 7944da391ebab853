#!/usr/bin/env bash
# make deb-test: the Debian package's life cycle in the test VM. Builds two
# versions of the package from this tree (make deb VERSION=...), then in one
# guest (run.sh -r: rxe0/rxe1 up) runs test/vm/guest-deb.sh: install (nothing
# enabled or started), the udev rule matching the real CUSE nodes, an upgrade
# under a running ucmd (not restarted), remove and purge.
#
# Logs: bin/deb-test/ (build-*.log, run/output, run/console.log).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
OUT=bin/deb-test # relative: make deb stages under $(CURDIR)/$(BIN)
rm -rf "$OUT"
mkdir -p "$OUT"
V1=0.9.0 V2=1.0.0
for v in $V1 $V2; do
  make --no-print-directory deb VERSION="$v" BIN="$OUT/$v" >"$OUT/build-$v.log" 2>&1 ||
    { cat "$OUT/build-$v.log" >&2; echo "deb-test: make deb VERSION=$v failed" >&2; exit 1; }
done
arch=$(go env GOARCH)
rc=0
"$HERE/run.sh" -r -t 300 -o "$OUT/run" -- "$HERE/guest-deb.sh" \
  "$REPO/$OUT/$V1/ucmd_${V1}_$arch.deb" "$REPO/$OUT/$V2/ucmd_${V2}_$arch.deb" "$REPO/dist/90-ucmd.rules" || rc=$?
if [ $rc = 0 ]; then echo "deb-test: PASS"; else echo "deb-test: FAIL ($rc); logs in $OUT/run" >&2; fi
exit $rc
