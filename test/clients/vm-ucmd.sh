#!/bin/sh
# ucmclient against a real ucmd inside the test VM (CUSE + rxe0/rxe1):
#   server on ucm1 (rxe1), client on ucm0 (rxe0), found through `ucmd exec`
#   discovery; then the same pair on `ucmd serve --fabric sim` (--no-verbs).
# Usage (host): test/clients/vm-ucmd.sh [UCMD_BINARY]   (default: builds ./cmd/ucmd)
#   env: N (sequence count, default 5), P (parallel, default 4), ONLY=rxe|sim
set -u
if [ "${1:-}" = "--guest" ]; then
	d=$2 N=$3 P=$4 WHICH=${5:-all}
	pass=0 fail=0
	ok() { pass=$((pass + 1)); echo "ok   $1"; }
	bad() { fail=$((fail + 1)); echo "FAIL $1"; }
	start_ucmd() { # args...
		"$d/ucmd" serve "$@" > "$d/ucmd.log" 2>&1 &
		upid=$!
		i=0
		while [ ! -e /dev/infiniband/ucm1 ] || [ ! -e /run/ucmd/infiniband_cm/abi_version ] && [ ! -e /dev/infiniband/ucm1 ]; do
			i=$((i + 1))
			if [ $i -gt 200 ] || ! kill -0 $upid 2>/dev/null; then echo "ucmd did not come up:"; cat "$d/ucmd.log"; return 1; fi
			sleep 0.05
		done
		sleep 0.2
		return 0
	}
	stop_ucmd() {
		kill -TERM "$upid" 2>/dev/null
		wait "$upid"
		echo "     ucmd exit $?"
	}
	pair() { # NAME SERVER_ARGS -- CLIENT_ARGS
		name=$1; shift
		s=""
		while [ "$1" != "--" ]; do s="$s $1"; shift; done
		shift
		# shellcheck disable=SC2086
		"$d/ucmd" exec -- "$d/ucmclient" $s > "$d/srv.out" 2>&1 &
		spid=$!
		sleep 0.3
		"$d/ucmd" exec -- "$d/ucmclient" "$@" > "$d/cli.out" 2>&1
		crc=$?
		wait $spid
		src=$?
		if [ $crc = 0 ] && [ $src = 0 ]; then
			ok "$name"; tail -n 2 "$d/cli.out" | sed 's/^/     /'
		else
			bad "$name (client $crc, server $src)"
			echo "  --- server"; sed 's/^/     /' "$d/srv.out" | tail -n 30
			echo "  --- client"; sed 's/^/     /' "$d/cli.out" | tail -n 30
			echo "  --- ucmd log"; tail -n 30 "$d/ucmd.log" | sed 's/^/     /'
		fi
	}
	if [ "$WHICH" != sim ] && start_ucmd; then
		# shellcheck disable=SC2012 # a listing for the log
		ls -l /dev/infiniband/ | sed 's/^/     /'
		"$d/ucmd" exec -- cat /sys/class/infiniband_cm/abi_version /sys/class/infiniband_cm/ucm0/ibdev /sys/class/infiniband_cm/ucm1/ibdev | sed 's/^/     /'
		S="-l 0x1000 -d rxe1 -t 10000"
		C="-c -d rxe0 -g fe80::ff:fe00:2 -t 10000"
		# $S and $C are lists of options: split on purpose
		# shellcheck disable=SC2086
		{
			pair "rxe: 1 connection, RC data both ways" $S -v -- $C -v
			pair "rxe: $N in sequence" $S -n "$N" -- $C -n "$N"
			pair "rxe: $P at once" $S -P "$P" -- $C -P "$P"
			pair "rxe: data before RTU (NOTIFY)" $S -n 2 -- $C -n 2 --data-before-rtu
		}
		# SIGKILL a connected client: ucmd must clean up its ids and the
		# server must get the disconnect (DREQ from ucmd's close path).
		# shellcheck disable=SC2086 # $S: options
		"$d/ucmd" exec -- "$d/ucmclient" $S -t 30000 > "$d/srv.out" 2>&1 &
		spid=$!
		sleep 0.3
		# shellcheck disable=SC2086 # $C: options
		"$d/ucmd" exec -- "$d/ucmclient" $C --hold 60000 -v > "$d/cli.out" 2>&1 &
		i=0
		while ! grep -q "holding" "$d/cli.out" && [ $i -lt 400 ]; do i=$((i + 1)); sleep 0.05; done
		cpid=$(sed -n 's/.*holding.*(pid \([0-9]*\)).*/\1/p' "$d/cli.out")
		"$d/ucmd" status > "$d/status1.txt" 2>&1
		if [ -n "$cpid" ] && kill -9 "$cpid"; then
			wait $spid
			src=$?
			sleep 0.5
			"$d/ucmd" status > "$d/status2.txt" 2>&1
			if [ $src = 0 ] && ! grep -q "pid $cpid" "$d/status2.txt"; then
				ok "rxe: SIGKILL of a connected client: server got the disconnect, ids cleaned up"
			else
				bad "rxe: SIGKILL of a connected client (server $src)"
			fi
			sed 's/^/     /' "$d/srv.out" | tail -n 3
			echo "     ucmd status while connected:"; grep -iE "pid|id " "$d/status1.txt" | head -12 | sed 's/^/       /'
			echo "     ucmd status after the kill:"; grep -iE "pid|id " "$d/status2.txt" | head -12 | sed 's/^/       /'
		else
			bad "rxe: SIGKILL case: the client never held a connection"; cat "$d/cli.out"; kill $spid; wait $spid
		fi
		stop_ucmd
	fi
	if [ "$WHICH" != rxe ] && start_ucmd --fabric sim --sim-devices 2; then
		g0=$("$d/ucmd" status 2>/dev/null | grep -io 'fe80:[0-9a-f:]*' | sed -n 1p)
		g1=$("$d/ucmd" status 2>/dev/null | grep -io 'fe80:[0-9a-f:]*' | sed -n 2p)
		"$d/ucmd" status 2>&1 | head -20 | sed 's/^/     /'
		echo "     sim GIDs: '$g0' '$g1'"
		if [ -n "$g0" ] && [ -n "$g1" ]; then
			pair "sim: $N in sequence, no verbs" -l 0x1000 -d sim1 --no-verbs -n "$N" -- -c -d sim0 --no-verbs -G "$g0" -g "$g1" -n "$N"
			pair "sim: $P at once, no verbs" -l 0x1000 -d sim1 --no-verbs -P "$P" -- -c -d sim0 --no-verbs -G "$g0" -g "$g1" -P "$P"
		else
			bad "sim: no GIDs found in ucmd status"
		fi
		stop_ucmd
	fi
	echo "vm-ucmd: $pass passed, $fail failed"
	[ $fail = 0 ]
	exit
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
w=$(mktemp -d /tmp/ucmclient-vm.XXXXXX)
trap 'rm -rf "$w"' EXIT INT TERM
"$here/build.sh" "$w/ucmclient" || exit 1
if [ -n "${1:-}" ]; then cp "$1" "$w/ucmd" || exit 1; else (cd "$root" && CGO_ENABLED=0 go build -o "$w/ucmd" ./cmd/ucmd) || exit 1; fi
cp "$0" "$w/vm-ucmd.sh"
"$root/test/vm/run.sh" -r -t "${VMCHECK_TIMEOUT:-900}" -w "$w" -- sh "$w/vm-ucmd.sh" --guest "$w" "${N:-5}" "${P:-4}" "${ONLY:-all}"
