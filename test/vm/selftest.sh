#!/usr/bin/env bash
# make vm-selftest: checks run.sh's contract (exit statuses, working
# directory, output capture, run dir, lock) and run2.sh's (two guests that
# reach each other, status) with nine short boots, about a minute.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RUN=$HERE/run.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0 passes=0

# check NAME WANT-STATUS GOT-STATUS [CONDITION-COMMAND...]
check() {
  local name=$1 want=$2 got=$3; shift 3
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: status $got, want $want"; fails=$((fails + 1)); return
  fi
  if [ $# -gt 0 ] && ! "$@"; then
    echo "FAIL $name: status $got but condition failed: $*"; fails=$((fails + 1)); return
  fi
  echo "ok   $name"; passes=$((passes + 1))
}

# no boot needed
UCMD_VM_CACHE=$T/none "$RUN" true 2>/dev/null
check "not set up -> 123" 123 $?
flock "$T/lock" sleep 5 & holder=$!
sleep 0.5
UCMD_VM_LOCK=$T/lock UCMD_VM_LOCK_WAIT=1 "$RUN" true 2>/dev/null
check "lock held elsewhere -> 122" 122 $?
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# boots
cd "$T" && mkdir -p wd && cd wd || exit 1
first_run_ok() {
  grep -qx "$T/wd" "$T/out" && grep -qx to-stderr "$T/out" && [ -f "$T/run/scratch/f" ]
}
# shellcheck disable=SC2016 # expanded in the guest
"$RUN" -o "$T/run" -- sh -c 'pwd; echo to-stderr >&2; echo kept > "$UCMD_VM_SCRATCH/f"; exit 7' \
  > "$T/out" 2>/dev/null
check "command status, cwd, stdout+stderr, scratch" 7 $? first_run_ok

"$RUN" -t 15 -- sleep 600 > /dev/null 2>&1
check "timeout -> 124" 124 $?

"$RUN" -- sh -c 'echo c > /proc/sysrq-trigger' > /dev/null 2>&1
check "guest crash -> 125" 125 $?

"$RUN" -r -- sh -c 'lsmod | grep -q "^rdma_rxe" && ! lsmod | grep -q "^ib_cm "' > /dev/null 2>&1
check "-r: rxe loaded, ib_cm not" 0 $?

"$RUN" -w "$T" -- sh -c "echo via-w > $T/w" > /dev/null 2>&1
check "-w share is writable" 0 $? grep -qx via-w "$T/w"

# two guests: B reaches A over the virtio link; A waits for B's marker.
# The scripts live in $T: the guests see the host's /tmp.
cat > "$T/lib.sh" <<'EOF'
waitfor() {
  i=0
  while [ ! -e "$UCMD_VM_SHARED/$1" ]; do
    i=$((i + 1)); [ $i -le 300 ] || return 1; sleep 0.1
  done
}
EOF
cat > "$T/a.sh" <<EOF
. "$T/lib.sh"
"$HERE/guest-net.sh" 192.168.77.1/24 && touch "\$UCMD_VM_SHARED/A.up" && waitfor B.done
EOF
cat > "$T/b.sh" <<EOF
. "$T/lib.sh"
"$HERE/guest-net.sh" 192.168.77.2/24 && waitfor A.up &&
  busybox ping -c 1 -W 5 192.168.77.1 && touch "\$UCMD_VM_SHARED/B.done"
EOF
"$HERE/run2.sh" -t 120 -a "sh $T/a.sh" -b "sh $T/b.sh" > "$T/two" 2>&1
check "run2: two guests, B pings A" 0 $? grep -q "B| 1 packets transmitted, 1 packets received" "$T/two"
"$HERE/run2.sh" -t 60 -a true -b 'exit 4' > /dev/null 2>&1
check "run2: B's failure is the status" 4 $?

echo "vm selftest: $passes passed, $fails failed"
[ "$fails" = 0 ]
