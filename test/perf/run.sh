#!/usr/bin/env bash
# make perf / make perf-check: ucmd's request path and connection rate
# against their anchors (libfuse3's CUSE floor, the kernel's rdma_cm), all
# in ONE boot of the test VM (docs/perf.md). Prints the ratio table and
# writes bin/perf/perf.json (and raw.txt, the guest's measurement lines).
#
#   test/perf/run.sh [--short]
#
# --short (make perf-check, part of make check): one repetition of every
# measurement at small counts, and the summary only checks that every
# figure and the JSON were produced. Numbers from a short run mean little.
# Environment: REPS, PAIRS, SEQ, WIN, PREFILL, SLICES, HELD override the counts.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
OUT=${PERF_OUT:-bin/perf}
short=
[ "${1:-}" = --short ] && short=1
if [ -n "$short" ]; then
  REPS=${REPS:-1} PAIRS=${PAIRS:-400} SEQ=${SEQ:-10} WIN=${WIN:-50} PREFILL=${PREFILL:-5000} SLICES=${SLICES:-2} HELD=${HELD:-100}
else
  REPS=${REPS:-4} PAIRS=${PAIRS:-4800} SEQ=${SEQ:-100} WIN=${WIN:-200} PREFILL=${PREFILL:-100000} SLICES=${SLICES:-8} HELD=${HELD:-1000}
fi

case $HELD in
*[!0-9]* | '' | 0) echo "perf: HELD=$HELD: want a positive multiple of 100" >&2; exit 2 ;;
esac
[ $((HELD % 100)) -eq 0 ] || { echo "perf: HELD=$HELD: want a positive multiple of 100" >&2; exit 2; }

mkdir -p "$OUT"
go build -trimpath -o "$OUT/ucmd" ./cmd/ucmd
go build -trimpath -o "$OUT/gofloor" ./test/perf/gofloor
make -B --no-print-directory BIN="$OUT" PERF_CC="${CC:-gcc}" "$OUT/ucmclient" perf-anchors >/dev/null

echo "perf: one boot: REPS=$REPS PAIRS=$PAIRS SLICES=$SLICES SEQ=$SEQ WIN=$WIN PREFILL=$PREFILL HELD=$HELD (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
rc=0
# --short (make check) finishes in about two minutes: a guest stuck in it
# fails after ten, not fifty.
guest_timeout=${PERF_TIMEOUT:-3000}
[ -n "$short" ] && guest_timeout=${PERF_TIMEOUT:-600}
test/vm/run.sh -r -t "$guest_timeout" -- sh test/perf/guest.sh "$OUT" "$REPS" "$PAIRS" "$SEQ" "$WIN" "$PREFILL" "$SLICES" "$HELD" \
  > "$OUT/raw.txt" || rc=$?
if [ $rc != 0 ]; then
  echo "perf: the guest run failed (exit $rc); its output:" >&2
  cat "$OUT/raw.txt" >&2
  exit 1
fi
go run ./test/perf/summarize ${short:+-check} -json "$OUT/perf.json" < "$OUT/raw.txt"
