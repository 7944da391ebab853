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
LL0=fe80::ff:fe00:1 LL1=fe80::ff:fe00:2 # rxe0/rxe1 GID 0 (test/vm/guest-rdma.sh)
T=/sys/kernel/tracing
fail() { echo "trace: FAIL: $*" >&2; exit 1; }
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
	grep -q 'entries-in-buffer/entries-written: \([0-9]*\)/\1 ' $T/trace || echo "trace: $f: the buffer overflowed, early records lost" >&2
	cat $T/trace > "$f"
}

"$B/ucmd" serve --log-level warn > /tmp/ucmd.log 2>&1 &
upid=$!
i=0
while [ ! -e /dev/infiniband/ucm1 ]; do
	i=$((i + 1))
	{ [ $i -le 400 ] && kill -0 $upid 2>/dev/null; } || { cat /tmp/ucmd.log >&2; fail "ucmd did not start"; }
	sleep 0.05
done
"$B/ucmd" exec -- "$B/ucmclient" -l 0x1000 -d rxe1 -n 0 --libibcm --no-verbs -w 0 > /tmp/srv.log 2>&1 &
spid=$!
i=0
until grep -q "listening on" /tmp/srv.log 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 600 ] || { cat /tmp/srv.log >&2; fail "the server did not start"; }
	sleep 0.05
done
client() { "$B/ucmd" exec -- "$B/ucmclient" -c -d rxe0 -g $LL1 -s 0x1000 --libibcm -w 0 -T 600 --no-verbs -G $LL0 "$@"; }
client -n 3 > /dev/null || fail "warm-up connections" # the first waits for neighbour discovery
record "$O/trace-ucmd.txt" client -n "$N"
kill $spid $upid
wait $spid $upid 2>/dev/null || true
record "$O/trace-umadping.txt" "$B/umadping" -a rxe0 -b rxe1 -g $LL1 -n $((N * 2)) -L umad
