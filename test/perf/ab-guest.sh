#!/bin/sh
# Runs INSIDE the test VM (test/perf/ab.sh boots it): two daemons, "base"
# and "new", taking turns round by round in ONE boot, with the libfuse3
# floor measured in every round beside them: ROUNDS rounds of cmdbench at
# 1 and 4 client threads, then ROUNDS rounds of CM-only connections one at
# a time and with 50 in flight, each daemon started afresh for each. Odd
# rounds run base first, even rounds new first, so that neither always
# follows the other.
# Prints "rep=ROUND ..." lines for test/perf/summarize -ab.
#
# Usage: ab-guest.sh BINDIR ROUNDS PAIRS SEQ WIN
set -eu
B=$1 ROUNDS=$2 PAIRS=$3 SEQ=$4 WIN=$5
SID=0x1000
TAG=perf-ab
# shellcheck source=test/perf/guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"
UCMD_FLAGS="--log-level warn"

no_kernel_cm
"$B/cusefloor" infiniband/ucmfloor > /tmp/floor.log 2>&1 &
fpid=$!
waitnode /dev/infiniband/ucmfloor $fpid

# in_turn DAEMON...: "$step DAEMON" for each, each in a fresh daemon
in_turn() {
	for d in "$@"; do
		UCMD=$B/ucmd-$d
		# shellcheck disable=SC2119 # no wrapper
		start_ucmd
		"$step" "$d"
		stop_ucmd
	done
}
# each round runs base first when odd, new first when even
rounds() { # STEP
	step=$1
	rep=1
	while [ $rep -le "$ROUNDS" ]; do
		[ "$step" != cuse ] || for t in 1 4; do
			out "$B/cmdbench" -D /dev/infiniband/ucmfloor -m floor -n $((PAIRS / t)) -t $t -p $fpid -l floor
		done
		if [ $((rep % 2)) -eq 1 ]; then in_turn base new; else in_turn new base; fi
		rep=$((rep + 1))
	done
}

cuse() { # DAEMON: cmdbench at 1 and 4 client threads
	for t in 1 4; do
		out "$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n $((PAIRS / t)) -t $t -p "$upid" -l "$1"
	done
}
conns() { # DAEMON: CM-only connections one at a time and with 50 in flight
	"$UCMD" exec -- "$B/ucmclient" -q -l $SID -d rxe1 -n 0 --libibcm --no-verbs -w 0 > /tmp/srv.log 2>&1 &
	spid=$!
	waitlog /tmp/srv.log "listening on" $spid
	conn_ucmd warm $SID --no-verbs -G $LL0 -n 3 > /dev/null
	conn_ucmd "$1-seq" $SID --no-verbs -G $LL0 -n "$SEQ"
	conn_ucmd "$1-win50" $SID --no-verbs -G $LL0 -n $((WIN / 50)) -P 50
	stop $spid
}

# The CUSE path first, then the connections, so that the two daemons'
# runs of one measurement lie next to each other.
log "$ROUNDS rounds of (floor, base, new) or (floor, new, base): $PAIRS pairs at 1 and 4 client threads"
rounds cuse
stop $fpid
log "$ROUNDS rounds of (base, new) or (new, base): $SEQ CM-only connections one at a time, $WIN with 50 in flight"
rounds conns
log "done"
