#!/usr/bin/env bash
# make perf-ab BASE=REV: the daemon of the working tree ("new") against the
# daemon of git revision REV ("base") in ONE boot of the test VM, the two
# taking turns round by round (docs/perf.md, "Comparing two daemons"). For
# each figure it prints new ÷ base paired by round: the median, the range,
# in how many rounds new did better, and the sign test's p for that count.
# Raw lines and JSON land in bin/perf-ab/.
#
#   test/perf/ab.sh [--short] REV
#
# --short (in make perf-check): two rounds at small counts, and the summary
# only checks that every figure was produced. Environment: ROUNDS, PAIRS
# (per round and thread count), SEQ and WIN (connections one at a time and
# with 50 in flight, per round).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
short=
if [ "${1:-}" = --short ]; then
  short=1
  shift
fi
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 [--short] REV (make perf-ab BASE=REV)" >&2
  exit 2
fi
if [ -n "$short" ] && ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # make perf-check from an unpacked tarball: there is no revision to build
  echo "perf-ab: not a git checkout, no base to build: skipped" >&2
  exit 0
fi
base=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "perf-ab: $1: not a commit" >&2; exit 2; }
if [ -n "$short" ]; then
  ROUNDS=${ROUNDS:-2} PAIRS=${PAIRS:-200} SEQ=${SEQ:-10} WIN=${WIN:-50}
else
  ROUNDS=${ROUNDS:-12} PAIRS=${PAIRS:-2400} SEQ=${SEQ:-100} WIN=${WIN:-200}
fi
for v in ROUNDS PAIRS SEQ WIN; do
  case ${!v} in
  *[!0-9]* | '' | 0) echo "perf-ab: $v=${!v}: want a positive number" >&2; exit 2 ;;
  esac
done
[ $((WIN % 50)) -eq 0 ] || { echo "perf-ab: WIN=$WIN: want a multiple of 50" >&2; exit 2; }

OUT=${PERF_OUT:-bin/perf-ab}
mkdir -p "$OUT"
# The base daemon is built from a clean export of REV, so that nothing of
# the working tree leaks into it; the clients are the working tree's, the
# same for both daemons.
src=$(mktemp -d "$OUT/base-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
git archive "$base" | tar -x -C "$src"
(cd "$src" && go build -trimpath -o "$REPO/$OUT/ucmd-base" ./cmd/ucmd)
go build -trimpath -o "$OUT/ucmd-new" ./cmd/ucmd
make -B --no-print-directory BIN="$OUT" PERF_CC="${CC:-gcc}" "$OUT/ucmclient" "$OUT/cusefloor" "$OUT/cmdbench" >/dev/null

echo "perf-ab: new = working tree ($(git describe --always --dirty)), base = $(git log -1 --format='%h %s' "$base" | cut -c1-72)" >&2
echo "perf-ab: one boot: ROUNDS=$ROUNDS PAIRS=$PAIRS SEQ=$SEQ WIN=$WIN (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
rc=0
test/vm/run.sh -r -t "${PERF_TIMEOUT:-3000}" -- sh test/perf/ab-guest.sh "$OUT" "$ROUNDS" "$PAIRS" "$SEQ" "$WIN" \
  > "$OUT/raw.txt" || rc=$?
if [ $rc != 0 ]; then
  echo "perf-ab: the guest run failed (exit $rc); its output:" >&2
  cat "$OUT/raw.txt" >&2
  exit 1
fi
go run ./test/perf/summarize -ab ${short:+-check} -json "$OUT/ab.json" < "$OUT/raw.txt"
