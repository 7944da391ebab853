#!/bin/sh
# Runs INSIDE the test VM (test/perf/trace.sh boots it with run.sh -r):
# CONNS CM-only connections through ucmd, one at a time, and then 2 x CONNS
# umadping trips, each under the kernel's ib_umad, ib_mad and scheduler
# tracepoints; writes OUT/trace-ucmd.txt and OUT/trace-umadping.txt for
# test/perf/madtrace.
#
# Usage: trace-guest.sh BINDIR OUT CONNS
set -eu
B=$1 O=$2 N=$3
TAG=trace
# shellcheck source=test/perf/guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T || fail "mount tracefs"
for e in ib_umad ib_mad; do [ -d $T/events/$e ] || fail "no $e tracepoints"; done
modprobe -r rdma_ucm rdma_cm iw_cm ib_cm 2>/dev/null || true
[ ! -d /sys/module/ib_cm ] || fail "ib_cm is still loaded"

echo mono > $T/trace_clock # one clock for both CPUs
echo 30000 > $T/buffer_size_kb
echo 0 > $T/tracing_on
for e in ib_umad ib_mad sched/sched_switch sched/sched_wakeup; do echo 1 > $T/events/$e/enable; done
record() { # FILE CMD...: runs CMD with tracing on, saves the trace
	f=$1
	shift
	echo > $T/trace
	echo 1 > $T/tracing_on
	"$@" || { echo 0 > $T/tracing_on; fail "$*"; }
	echo 0 > $T/tracing_on
	grep -q 'entries-in-buffer/entries-written: \([0-9]*\)/\1 ' $T/trace || log "$f: the buffer overflowed, early records lost"
	cat $T/trace > "$f"
}

"$B/ucmd" serve --log-level warn > /tmp/ucmd.log 2>&1 &
upid=$!
waitnode /dev/infiniband/ucm1 $upid
"$B/ucmd" exec -- "$B/ucmclient" -q -l 0x1000 -d rxe1 -n 0 --libibcm --no-verbs -w 0 > /tmp/srv.log 2>&1 &
spid=$!
waitlog /tmp/srv.log "listening on" $spid
client() { "$B/ucmd" exec -- "$B/ucmclient" -q -c -d rxe0 -g $LL1 -s 0x1000 --libibcm -w 0 -T 600 --no-verbs -G $LL0 "$@"; }
client -n 3 > /dev/null || fail "warm-up connections" # the first waits for neighbour discovery
conns() { # the connections, printing only the client's summary line
	client -n "$N" > /tmp/conns.out || { cat /tmp/conns.out >&2; return 1; }
	grep '^ucmclient-perf' /tmp/conns.out >&2 || true
}
record "$O/trace-ucmd.txt" conns
stop $spid $upid
record "$O/trace-umadping.txt" "$B/umadping" -a rxe0 -b rxe1 -g $LL1 -n $((N * 2)) -L umad
