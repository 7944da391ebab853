#!/bin/sh
# Runs INSIDE the test VM (test/perf/run.sh boots it with run.sh -r): every
# anchor and every ucmd figure of docs/perf.md in ONE boot, alternating
# anchor and ucmd (A B A B ...) so that drift in the guest cancels out of
# the ratios. Prints one key=value line per measurement, prefixed "rep=R",
# for test/perf/summarize.
#
# Usage: guest.sh BINDIR REPS PAIRS SEQ WIN PREFILL SLICES HELD
#   PAIRS   write pairs per CUSE measurement
#   SEQ     connections per one-at-a-time measurement
#   WIN     connections per 50-in-flight measurement (a multiple of 50)
#   PREFILL the "many ids" case of the per-command cost (1,000 is the other)
#   SLICES  rounds per repetition of the CUSE measurements (each a sample)
#   HELD    established connections held at once for the RSS per
#           connection (a multiple of 100)
set -eu
B=$1 REPS=$2 PAIRS=$3 SEQ=$4 WIN=$5 PREFILL=$6 SLICES=$7 HELD=$8
SID=0x1000 SIDQP=0x2000
TAG=perf
# shellcheck source=test/perf/guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"
if [ "$HELD" -le 0 ] || [ $((HELD % 100)) -ne 0 ]; then fail "HELD=$HELD: want a positive multiple of 100"; fi
UCMD_FLAGS="--log-level warn --user-ids $((PREFILL + 10000)) --max-ids $((PREFILL + 20000))"

# ---------------------------------------------------------------- CUSE path
"$B/cusefloor" infiniband/ucmfloor > /tmp/floor.log 2>&1 &
fpid=$!
"$B/cusefloor" infiniband/ucmfloorpvw --pvw > /tmp/floorpvw.log 2>&1 &
ppid=$!
# the Go floor: ucmd's CUSE server making the same copy, without ucm
"$B/gofloor" infiniband/ucmgofloor > /tmp/gofloor.log 2>&1 &
gpid=$!
waitnode /dev/infiniband/ucmfloor $fpid
waitnode /dev/infiniband/ucmfloorpvw $ppid
waitnode /dev/infiniband/ucmgofloor $gpid
start_ucmd
# Each repetition is SLICES short rounds of (floor, ucmd, floor+pvw, Go
# floor), and every round is a sample of its own (rep=...): on a busy host
# TCG slows down in bursts, and the shorter the distance between the
# measurements a ratio divides, the less a burst falls on one side of it.
log "CUSE path: $REPS reps x $SLICES rounds x (floor, ucmd, floor+pvw, Go floor) x 1 and 4 threads, $PAIRS pairs a rep"
r=1
while [ $r -le "$REPS" ]; do
	s=1
	while [ $s -le "$SLICES" ]; do
		rep=$(((r - 1) * SLICES + s))
		for t in 1 4; do
			n=$((PAIRS / SLICES / t))
			out "$B/cmdbench" -D /dev/infiniband/ucmfloor -m floor -n $n -t $t -p $fpid -l floor
			out "$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n $n -t $t -p $upid -l ucmd
			out "$B/cmdbench" -D /dev/infiniband/ucmfloorpvw -m floorpvw -n $n -t $t -p $ppid -l floorpvw
			out "$B/cmdbench" -D /dev/infiniband/ucmgofloor -m floorpvw -n $n -t $t -p $gpid -l gofloor
		done
		s=$((s + 1))
	done
	# the per-command cost with 1,000 and with PREFILL live ids, in a
	# fresh daemon: the RSS growth per id (ids-many) is only the ids' when
	# the heap has no free pages left by earlier runs (docs/perf.md,
	# "Memory")
	stop_ucmd
	start_ucmd
	out "$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n $((PAIRS / 2)) -k 1000 -p $upid -l ids-1k
	out "$B/cmdbench" -D /dev/infiniband/ucm0 -m ucm -n $((PAIRS / 2)) -k "$PREFILL" -p $upid -l ids-many
	stop_ucmd
	r=$((r + 1))
	[ $r -gt "$REPS" ] || start_ucmd
done
stop $gpid # the libfuse3 floors serve on: the connection section measures them too

# ---------------------------------------------------------- connection rate
# The kernel's CM and ucmd cannot own the CM class at once: each rep loads
# rdma_cm for the anchors, unloads it, then runs ucmd (conn_ucmd is in
# guest-lib.sh).

# held_rss: the daemon's RSS growth per established connection, both ends
# in it, in a daemon started for it without transparent huge pages (its
# RSS would move in 2 MiB steps): clients of 50 connections each, one
# after the other, hold theirs until killed; VmRSS once half of HELD are
# held and once all are, and the growth between (docs/perf.md, "Memory").
held_rss() {
	start_ucmd "$B/nothp"
	# -t: the server's side of a connection would give up waiting for the
	# DREQ after the default 10 s and tear it down
	"$B/ucmd" exec -- "$B/ucmclient" -q -l $SID -d rxe1 -n 0 --no-verbs -w 0 -t 3600000 > /tmp/srv.log 2>&1 &
	spid=$!
	waitlog /tmp/srv.log "listening on" $spid
	conn_ucmd warm-held $SID --no-verbs -G $LL0 -n 3 > /dev/null
	held=0 hpids='' rss_half=''
	while [ $held -lt "$HELD" ]; do
		f=/tmp/held.$held.log
		"$B/ucmd" exec -- "$B/ucmclient" -v -c -d rxe0 -g $LL1 -s $SID -w 0 -T 600 --no-verbs -G $LL0 \
			-n 50 -P 50 --hold 3600000 > $f 2>&1 &
		hpids="$hpids $!"
		t=0
		until [ "$(grep -c 'holding' $f)" -ge 50 ]; do
			t=$((t + 1))
			[ $t -le 600 ] || { tail -n 5 $f >&2; fail "held connections: 50 not established in 60 s"; }
			sleep 0.1
		done
		held=$((held + 50))
		if [ $held -eq $((HELD / 2)) ] || [ $held -eq "$HELD" ]; then
			sleep 1 # the last connections' events are delivered
			rss=$(awk '/^VmRSS/{print $2}' /proc/$upid/status)
			[ -n "$rss_half" ] || rss_half=$rss
		fi
	done
	echo "rep=$rep memconn label=mem-conn held=$HELD rss_half_kib=$rss_half rss_kib=$rss rss_bytes_per_conn=$(((rss - rss_half) * 1024 * 2 / HELD))"
	# shellcheck disable=SC2086 # a list of pids
	stop $hpids $spid
	stop_ucmd
}

log "connections: $REPS reps x (kernel rdma_cm, ucmd): $SEQ one at a time, $WIN with 50 in flight"
rep=1
while [ $rep -le "$REPS" ]; do
	echo "rep=$rep guest label=guest cpus=$(nproc)" # the CPUs a rate can use
	kernel_cm
	"$B/rdmaconn" -l "$LL1%veth1" > /tmp/rdmaconn.log 2>&1 &
	kpid=$!
	waitlog /tmp/rdmaconn.log listening $kpid
	K="-s $LL1%veth0 -b $LL0%veth0"
	# shellcheck disable=SC2086 # a list of flags
	{
		out "$B/rdmaconn" $K -n "$SEQ" -w 1 -L k-seq
		out "$B/rdmaconn" $K -n "$WIN" -w 50 -L k-win50
		out "$B/rdmaconn" $K -n 50 -w 50 -H -L k-burst50
	}
	stop $kpid
	"$B/rdmaconn" -l "$LL1%veth1" -q > /tmp/rdmaconn.log 2>&1 &
	kpid=$!
	waitlog /tmp/rdmaconn.log listening $kpid
	# shellcheck disable=SC2086 # a list of flags
	{
		out "$B/rdmaconn" $K -n "$SEQ" -w 1 -L k-seq-qp -q
		out "$B/rdmaconn" $K -n "$WIN" -w 50 -L k-win50-qp -q
		out "$B/rdmaconn" $K -n 50 -w 50 -H -L k-burst50-qp -q
	}
	stop $kpid
	no_kernel_cm
	# the umad floor under every MAD a userspace CM sends: one trip
	# write(2) -> rxe0 -> rxe1 -> read(2), nothing above umad
	out "$B/umadping" -a rxe0 -b rxe1 -g $LL1 -n $((SEQ * 3)) -L umad
	# the floor chain: a CM-only connection's critical path one at a
	# time, its 4 trips through umad and its 7 CUSE exchanges on the
	# libfuse3 floor with the copy, in a connection's order
	out "$B/umadping" -a rxe0 -b rxe1 -g $LL1 -n "$SEQ" -x /dev/infiniband/ucmfloorpvw -L floor-chain
	# what the guest carries through umad with 50 MADs in flight, and at
	# what CPU per MAD; and the CUSE floor's CPU per write with the
	# guest's CPUs busy (4 client threads): the parts of the 50-in-flight
	# bound ("A bound with many in flight" in docs/perf.md)
	out "$B/umadping" -a rxe0 -b rxe1 -g $LL1 -n $((WIN * 5)) -w 50 -L umad-w50
	out "$B/cmdbench" -D /dev/infiniband/ucmfloor -m floor -n $((WIN * 10 / 4)) -t 4 -l floor-conn

	start_ucmd
	# CM only: a server without QPs; with QPs: one that gives each its QP
	"$B/ucmd" exec -- "$B/ucmclient" -q -l $SID -d rxe1 -n 0 --libibcm --no-verbs -w 0 > /tmp/srv.log 2>&1 &
	spid=$!
	"$B/ucmd" exec -- "$B/ucmclient" -q -l $SIDQP -d rxe1 -n 0 --libibcm -w 0 > /tmp/srvqp.log 2>&1 &
	qpid=$!
	waitlog /tmp/srv.log "listening on" $spid
	waitlog /tmp/srvqp.log "listening on" $qpid
	conn_ucmd warm $SID --no-verbs -G $LL0 -n 3
	# --cmd-times: where the connection's time goes, command by command,
	# for two clock reads a command (some 20 µs of a 10 ms connection)
	conn_ucmd u-seq $SID --no-verbs -G $LL0 -n "$SEQ" --cmd-times
	conn_ucmd u-win50 $SID --no-verbs -G $LL0 -n $((WIN / 50)) -P 50
	# 50 started at once and held until all are up, as rdmaconn -H
	conn_ucmd u-burst50 $SID --no-verbs -G $LL0 -n 1 -P 50 --burst
	conn_ucmd u-seq-qp $SIDQP -M 0 -n "$SEQ"
	conn_ucmd u-win50-qp $SIDQP -M 0 -n $((WIN / 50)) -P 50
	conn_ucmd u-burst50-qp $SIDQP -M 0 -n 1 -P 50 --burst
	stop $spid $qpid
	# the passive side's commands per connection (its whole run)
	r=$(grep '^ucmclient-cmds' /tmp/srv.log) || fail "no ucmclient-cmds line from the CM-only server"
	echo "rep=$rep ucmclient label=u-srv ${r#ucmclient-cmds }"
	stop_ucmd
	rep=$((rep + 1))
done
stop $fpid $ppid
rep=$REPS
log "RSS per held connection: $HELD held, 50 a client"
held_rss
log "done"
