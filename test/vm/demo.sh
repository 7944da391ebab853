#!/bin/sh
# `make run` where the host has no /dev/cuse: inside the test VM (Soft-RoCE
# rxe0 and rxe1, see README.md), start ucmd, then let two legacy clients
# find their devices the libibcm way (`ucmd exec`) and connect an RC queue
# pair through it, moving data both ways. Run by run.sh -r.
set -eu
bin=${UCMD_BIN:-bin/ucmd}
client=${UCMCLIENT_BIN:-bin/ucmclient}
run=/run/ucmd

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "ucmd serve (one node per RDMA device, kernel ib_cm not loaded)"
"$bin" serve --runtime-dir "$run" --fixed-numbers &
ucmd=$!
trap 'kill -TERM $ucmd 2>/dev/null; wait $ucmd 2>/dev/null || true' EXIT
i=0
until "$bin" status --runtime-dir "$run" >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -lt 200 ] || { echo "demo: ucmd did not come up" >&2; exit 1; }
  kill -0 $ucmd 2>/dev/null || { echo "demo: ucmd exited" >&2; exit 1; }
  sleep 0.05
done
ls -l /dev/infiniband/ucm*

say "what libibcm sees under ucmd exec"
# shellcheck disable=SC2016 # expanded by the inner shell
"$bin" exec --runtime-dir "$run" -- sh -c 'for d in /sys/class/infiniband_cm/ucm*; do echo "$d/ibdev: $(cat "$d/ibdev")"; done; echo "abi_version: $(cat /sys/class/infiniband_cm/abi_version)"'

say "a server on ucm1 (rxe1), a client on ucm0 (rxe0): REQ, REP, RTU, RC data, DREQ, DREP, timewait"
"$bin" exec --runtime-dir "$run" -- "$client" -d rxe1 -l 0x1000 -n 3 &
srv=$!
sleep 0.3
"$bin" exec --runtime-dir "$run" -- "$client" -d rxe0 -c -g fe80::ff:fe00:2 -s 0x1000 -n 3
wait $srv

say "ucmd status"
"$bin" status --runtime-dir "$run"
echo "(FAILED-COMMANDS counts the commands answered with an error, by errno. EISCONN"
echo " there is the server's NOTIFY(COMM_EST) on data that came after the CM had the"
echo " RTU: the kernel answered it so too, and the client then waits for the RTU event.)"

say "stopping ucmd (SIGTERM)"
kill -TERM $ucmd
wait $ucmd
trap - EXIT
echo "demo: done"
