#!/usr/bin/env bash
# Instructions per command on the request path, counted by callgrind on the
# host (docs/perf.md, "Instructions per request"). Under TCG the test VM
# pays for every instruction of the daemon's own code, so this count is a
# noise-free view of the daemon CPU per command that `make perf` measures.
#
#   test/perf/callgrind.sh        (needs valgrind: apt-get install valgrind)
#
# Two host benchmarks, each run at N and 2N iterations so that start-up
# cancels out:
#   cuse: BenchmarkServerWrite, one WRITE through the CUSE server on a
#         socketpair (a no-op device), per request;
#   ucm:  BenchmarkHandleCreateDestroy, CREATE_ID+DESTROY_ID handed to
#         ucm's file as the server hands them, per pair.
# Columns: instructions in ucmd's own code and in package sync (the
# pools), then how many system calls went through the runtime's
# bookkeeping for calls that may block (runtime.entersyscall), and the
# benchmark's own allocations per op. Instructions elsewhere in the
# runtime are left out: valgrind runs one thread at a time, and the idle
# threads' search for work then varies from run to run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
command -v valgrind > /dev/null || { echo "callgrind.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
N=${N:-20000}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

go test -c -o "$TMP/cuse.test" ./cuse/
go test -c -o "$TMP/ucm.test" ./ucm/

# sums FILE: "own sync entersyscall" for the whole run: the first two in
# instructions (exclusive), the third in calls.
sums() {
	local f=$1
	callgrind_annotate --auto=no --threshold=100 "$f" 2> /dev/null | sed 's/,//g' | awk '
		/file:function/ { body = 1; next }
		!body || $1 !~ /^[0-9]+$/ { next }
		/_test\.go|cuse\/cusetest|conformance/ { next }
		/ucmd\/ucmd\// { own += $1; next }
		/\/src\/sync\// { sync += $1 }
		END { printf "%d %d ", own, sync }'
	calls '^runtime\.entersyscall$' "$f"
	echo
}

# calls PATTERN FILE: calls to the functions whose names match, from the
# call records of a callgrind file (which names a function in full once,
# then by number).
calls() {
	awk -v pat="$1" '
		/^c?fn=\(/ {
			i = index($0, "("); j = index($0, ")")
			id = substr($0, i + 1, j - i - 1)
			if (length($0) > j + 1) name[id] = substr($0, j + 2)
			if ($0 ~ /^cfn=/) t = (name[id] ~ pat)
			next
		}
		/^calls=/ { if (t) { split($1, a, "="); c += a[2] } t = 0 }
		END { printf "%d", c }' "$2"
}

# count NAME BINARY BENCH UNIT
count() {
	local n
	for n in "$N" $((2 * N)); do
		GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$TMP/$1.$n" \
			"$TMP/$2" -test.run '^$' -test.bench "^$3\$" -test.benchtime "${n}x" > "$TMP/$1.$n.log" 2>&1 ||
			{ cat "$TMP/$1.$n.log" >&2; exit 1; }
	done
	read -r o1 s1 e1 < <(sums "$TMP/$1.$N")
	read -r o2 s2 e2 < <(sums "$TMP/$1.$((2 * N))")
	local allocs
	allocs=$(sed -n 's/.* \([0-9.]*\) allocs\/op.*/\1/p' "$TMP/$1.$N.log")
	awk -v n="$N" -v u="$4" -v name="$1" -v o=$((o2 - o1)) -v s=$((s2 - s1)) -v e=$((e2 - e1)) -v m="$allocs" \
		'BEGIN { printf "%-4s per %-7s instructions: ucmd %5.0f  sync %4.0f   entersyscall calls (client included) %4.2f  allocations %s\n", name, u, o / n, s / n, e / n, m }'
}

# asyncpreemptoff: callgrind aborts on the runtime's preemption signals.
count cuse cuse.test BenchmarkServerWrite request
count ucm ucm.test BenchmarkHandleCreateDestroy pair
