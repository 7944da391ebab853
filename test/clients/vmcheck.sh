#!/bin/sh
# ucmclient inside the test VM (test/vm/run.sh -r: rxe0/rxe1, no ucmd):
#   1. discovery finds no ucm device for rxe0 and fails cleanly;
#   2. through the LD_PRELOAD ucm mock (mock/ucm_mock.c, not a CM), real RC QPs
#      on rxe0 <-> rxe1 are moved INIT/RTR/RTS with the returned masks and carry
#      data both ways: in sequence, in parallel, data before RTU (the passive
#      side NOTIFYs COMM_EST), and RTUs that never arrive.
# Usage (host): test/clients/vmcheck.sh        needs `make vm-setup` done.
# In the guest the same script runs with --guest DIR.
set -u
if [ "${1:-}" = "--guest" ]; then
	d=$2
	pass=0 fail=0
	ok() { pass=$((pass + 1)); echo "ok   $1"; }
	bad() { fail=$((fail + 1)); echo "FAIL $1"; }
	out=$("$d/ucmclient" -l 0x1000 -d rxe0 2>&1); rc=$?
	if [ $rc = 1 ] && printf '%s' "$out" | grep -q "no ucm device for rxe0"; then ok "server: no ucm device for rxe0"; else bad "server discovery: rc $rc: $out"; fi
	out=$("$d/ucmclient" -c -d rxe0 -g fe80::ff:fe00:2 2>&1); rc=$?
	if [ $rc = 1 ] && printf '%s' "$out" | grep -q "no ucm device for rxe0"; then ok "client: no ucm device for rxe0"; else bad "client discovery: rc $rc: $out"; fi
	mock() { # NAME ENV SERVER_ARGS -- CLIENT_ARGS
		name=$1; shift
		e=$1; shift
		if "$d/mock/run.sh" -b "$d/ucmclient" -m "$d/ucm_mock.so" ${e:+-e "$e"} -- "$@" > "$d/out.txt" 2>&1; then
			ok "mock+verbs: $name"; sed 's/^/     /' "$d/out.txt" | grep -E "ok:|connections ok" | head -4
		else
			bad "mock+verbs: $name"; sed 's/^/     /' "$d/out.txt"
		fi
	}
	S="-l 0x1000 -d rxe1"
	C="-c -d rxe0 -g fe80::ff:fe00:2"
	# $S and $C are lists of options: split on purpose
	# shellcheck disable=SC2086
	{
	mock "3 in sequence" "" $S -n 3 -- $C -n 3
	mock "2 rounds x 4 parallel, 8 x 1000 B" "" $S -n 2 -P 4 -- $C -n 2 -P 4 -M 8 -z 1000
	mock "data before RTU" "" $S -n 2 -- $C -n 2 --data-before-rtu
	mock "RTU lost: NOTIFY(COMM_EST)" "UCM_MOCK_DROP_RTU=1" $S -n 2 -- $C -n 2
	mock "nonblocking fd" "" $S -n 2 -P 2 --nonblock -- $C -n 2 -P 2 --nonblock
	}
	echo "vmcheck: $pass passed, $fail failed"
	[ $fail = 0 ]
	exit
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
w=$(mktemp -d /tmp/ucmclient-vm.XXXXXX)
trap 'rm -rf "$w"' EXIT INT TERM
"$here/build.sh" "$w/ucmclient" || exit 1
gcc -O2 -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -o "$w/ucm_mock.so" "$here/mock/ucm_mock.c" -ldl -lpthread || exit 1
mkdir "$w/mock" && cp "$here/mock/run.sh" "$w/mock/" && cp "$0" "$w/vmcheck.sh"
"$root/test/vm/run.sh" -r -t "${VMCHECK_TIMEOUT:-600}" -w "$w" -- sh "$w/vmcheck.sh" --guest "$w"
