#!/usr/bin/env bash
# Boot two guests at once, A and B, joined by one virtio NIC each (qemu
# "dgram" netdevs: UDP between two ports on 127.0.0.1, start order free), run
# a command in each, and exit 0 only if both exit 0.
#
# Usage: test/vm/run2.sh [-t SECS] [-o DIR] -a 'command A' -b 'command B'
#   -t SECS  per-guest timeout (default 600)
#   -o DIR   keep the run: DIR/A, DIR/B (run dirs), DIR/shared (default: a
#            temp dir, removed when both succeed)
#   -a, -b   shell commands, run with sh -c in the current directory
#
# In both guests DIR/shared is writable at the same path, named by
# $UCMD_VM_SHARED: coordinate through marker files there (write a temp file,
# then mv, so the other side never sees a half-written one). $UCMD_VM_ROLE is
# A or B. MACs are 52:54:00:77:00:01 (A) and :02 (B); rxe derives its GUID
# and link-local GID from them. test/vm/guest-net.sh 192.168.77.1/24 (A) or
# .2/24 (B) brings up the NIC and rxe0.
#
# Exit status: 0 if both guests exit 0, else A's status if non-zero, else B's
# (run.sh's statuses, 121-130, apply to each guest). Each guest's output is
# prefixed with "A| " or "B| ".
# Env: UCMD_VM_PORTS (two free UDP ports, default "47701 47702").
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
say() { echo "vm2: $*" >&2; }

TIMEOUT=600 DIR='' CMD_A='' CMD_B=''
while getopts ":t:o:a:b:" opt; do
  case $opt in
    t) TIMEOUT=$OPTARG ;;
    o) DIR=$OPTARG ;;
    a) CMD_A=$OPTARG ;;
    b) CMD_B=$OPTARG ;;
    *) usage ;;
  esac
done
if [ -z "$CMD_A" ] || [ -z "$CMD_B" ]; then usage; fi

# both guests run under one hold of the lock (unless the caller holds it,
# as run.sh allows: a second flock on a new open file would wait for itself)
if [ "${UCMD_VM_LOCK_HELD:-}" != 1 ]; then
  exec 9>>"${UCMD_VM_LOCK:-/tmp/ucmd-vm.lock}"
  if ! flock -n 9; then
    say "waiting for the VM lock (another VM is running)"
    flock -w "${UCMD_VM_LOCK_WAIT:-3600}" 9 || { say "VM lock not acquired"; exit 122; }
  fi
fi
export UCMD_VM_LOCK_HELD=1 UCMD_VM_SMP=${UCMD_VM_SMP:-1} UCMD_VM_MEM=${UCMD_VM_MEM:-1536}

KEEP=$DIR
if [ -z "$DIR" ]; then DIR=$(mktemp -d "${TMPDIR:-/tmp}/ucmd-vm2.XXXXXX"); fi
mkdir -p "$DIR/A" "$DIR/B" "$DIR/shared"
DIR=$(realpath "$DIR")
rm -f "$DIR"/shared/*

read -r pa pb <<< "${UCMD_VM_PORTS:-47701 47702}"
nic() { # nic LOCALPORT REMOTEPORT MAC
  echo "-netdev dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$1,remote.type=inet,remote.host=127.0.0.1,remote.port=$2 -device virtio-net-pci,netdev=n0,mac=$3"
}

pids=()
guest() { # guest ROLE NIC COMMAND
  # the subshell's status is run.sh's, not the prefixing sed's
  (
    "$HERE/run.sh" -t "$TIMEOUT" -o "$DIR/$1" -w "$DIR/shared" -n "guest$1" -q "$2" -- \
      env UCMD_VM_ROLE="$1" UCMD_VM_SHARED="$DIR/shared" sh -c "$3" 2>&1 | sed -u "s/^/$1| /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=($!)
}
# shellcheck disable=SC2317 # invoked by the trap
stop() { trap - INT TERM HUP; kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 130; }
trap stop INT TERM HUP

guest A "$(nic "$pa" "$pb" 52:54:00:77:00:01)" "$CMD_A"
guest B "$(nic "$pb" "$pa" 52:54:00:77:00:02)" "$CMD_B"
wait "${pids[0]}"; ra=$?
wait "${pids[1]}"; rb=$?
if [ "$ra" = 0 ] && [ "$rb" = 0 ] && [ -z "$KEEP" ]; then
  say "A and B exit status 0"
  rm -rf "$DIR"
  exit 0
fi
say "A exit status $ra, B exit status $rb; run dir: $DIR"
[ "$ra" != 0 ] && exit "$ra"
exit "$rb"
