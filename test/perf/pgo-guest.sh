#!/bin/sh
# Runs INSIDE the test VM (test/perf/pgo.sh boots it with run.sh -r): one
# ucmd serves, under its CPU profiler, the workloads of make perf in about
# the proportions its users meet them: the request path at 1 and 4 client
# threads, then CM-only connections one at a time and 50 in flight, and
# connections with a QP on both sides. The profile is what the go command
# optimises ucmd for (cmd/ucmd/default.pgo, docs/perf.md).
#
# Usage: pgo-guest.sh BINDIR PROFILE   (PROFILE in a directory shared -w)
set -eu
B=$1 PROF=$2
SID=0x1000 SIDQP=0x2000
TAG=pgo
# shellcheck source=test/perf/guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"

modprobe -r rdma_ucm rdma_cm iw_cm ib_cm 2>/dev/null || true
[ ! -d /sys/module/ib_cm ] || fail "ib_cm is still loaded"
"$B/ucmd" serve --log-level warn --cpuprofile "$PROF" > /tmp/ucmd.log 2>&1 &
upid=$!
waitnode /dev/infiniband/ucm1 $upid
sleep 0.2
log "request path: 1 and 4 client threads"
"$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n 6000 -t 1 -p $upid -l t1 >&2
"$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n 1500 -t 4 -p $upid -l t4 >&2

"$B/ucmd" exec -- "$B/ucmclient" -q -l $SID -d rxe1 -n 0 --libibcm --no-verbs -w 0 > /tmp/srv.log 2>&1 &
spid=$!
"$B/ucmd" exec -- "$B/ucmclient" -q -l $SIDQP -d rxe1 -n 0 --libibcm -w 0 > /tmp/srvqp.log 2>&1 &
qpid=$!
waitlog /tmp/srv.log "listening on" $spid
waitlog /tmp/srvqp.log "listening on" $qpid
conn() { # SERVICE_ID CLIENT_ARGS...
	sid=$1
	shift
	# shellcheck disable=SC2086 # a list of flags
	"$B/ucmd" exec -- "$B/ucmclient" -q -c -d rxe0 -g $LL1 -s "$sid" --libibcm -w 0 -T 600 "$@" >&2 ||
		{ tail -n 20 /tmp/srv.log /tmp/srvqp.log >&2; fail "the client failed: $*"; }
}
log "connections: CM only one at a time and 50 in flight, then with QPs"
conn $SID --no-verbs -G "$LL0" -n 3
conn $SID --no-verbs -G "$LL0" -n 300
conn $SID --no-verbs -G "$LL0" -n 20 -P 50
conn $SIDQP -M 0 -n 200
stop $spid $qpid
stop $upid
grep -i "level=error" /tmp/ucmd.log >&2 || true
[ -s "$PROF" ] || fail "no profile in $PROF"
log "done"
