#!/usr/bin/env bash
# make pgo: refreshes cmd/ucmd/default.pgo, the CPU profile that the go
# command builds ucmd with (profile-guided optimisation: go build picks up
# default.pgo of the main package by itself). It boots the test VM once and
# profiles a ucmd built without a profile under make perf's workloads
# (test/perf/pgo-guest.sh); docs/perf.md has the method and what it gained.
# Commit the new profile with the change that made it worth refreshing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
OUT=$(mkdir -p bin && mktemp -d "$REPO/bin/pgo.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
CC=${CC:-gcc}
go build -trimpath -pgo=off -o "$OUT/ucmd" ./cmd/ucmd
make --no-print-directory BIN="$OUT" "$OUT/ucmclient" >/dev/null
$CC -O2 -Wall -Wextra -Werror -pthread -o "$OUT/cmdbench" test/perf/cmdbench.c
test/vm/run.sh -r -w "$OUT" -t "${PGO_TIMEOUT:-900}" -- sh test/perf/pgo-guest.sh "$OUT" "$OUT/cpu.pprof"
# Through pprof: one merged, compacted protobuf, as go build wants it.
go tool pprof -proto "$OUT/ucmd" "$OUT/cpu.pprof" > cmd/ucmd/default.pgo 2>/dev/null
echo "pgo: wrote cmd/ucmd/default.pgo ($(wc -c < cmd/ucmd/default.pgo) bytes); top of the profile:"
go tool pprof -top -nodecount=12 "$OUT/ucmd" "$OUT/cpu.pprof" 2>/dev/null | sed -n '/flat%/,$p'
