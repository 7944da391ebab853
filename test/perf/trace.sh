#!/usr/bin/env bash
# make perf-trace: where a MAD's time goes, in one boot of the test VM:
# CM-only connections through ucmd and the bare umad trip (umadping) under
# the kernel's tracepoints, summarized by test/perf/madtrace (docs/perf.md,
# "Where a MAD waits"). Traces and summary land in bin/perf/trace/.
#
#   test/perf/trace.sh [--short]
#
# --short (in make perf-check): 10 connections, and the summary only checks
# that each trace holds a whole MAD. Environment: CONNS (default 100).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
OUT=${PERF_OUT:-bin/perf}/trace
short=
[ "${1:-}" = --short ] && short=1
CONNS=${CONNS:-$([ -n "$short" ] && echo 10 || echo 100)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
go build -trimpath -o "$OUT/ucmd" ./cmd/ucmd
make -B --no-print-directory BIN="$OUT" PERF_CC="${CC:-gcc}" "$OUT/ucmclient" "$OUT/umadping" >/dev/null
rm -f "$OUT"/trace-*.txt
test/vm/run.sh -r -w "$OUT" -t "${PERF_TIMEOUT:-900}" -- sh test/perf/trace-guest.sh "$OUT" "$OUT" "$CONNS" >&2
go run ./test/perf/madtrace ${short:+-check} "${OUT#"$REPO"/}/trace-ucmd.txt" "${OUT#"$REPO"/}/trace-umadping.txt" | tee "$OUT/summary.txt"
