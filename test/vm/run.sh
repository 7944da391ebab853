#!/usr/bin/env bash
# Boot the test VM (Debian's kernel under qemu TCG, the host root shared
# read-only over 9p with a throw-away tmpfs overlay), run ONE command as root
# in the current directory, power off, and exit with the command's status.
#
# Usage: test/vm/run.sh [options] [--] command [args...]
#   -t SECS  kill the guest after SECS seconds (default 600)
#   -o DIR   run dir, kept afterwards (default: a temp dir, removed on success)
#   -w DIR   share host DIR read-write at the same path (repeatable)
#   -r       set up RDMA first (guest-rdma.sh: cuse, rxe0/rxe1 on a veth pair)
#   -n NAME  guest hostname (default ucmd-vm)
#   -q ARGS  extra qemu arguments, word-split (e.g. a NIC for a two-guest run)
#   -v       verbose kernel console, streamed to stderr (slower under TCG)
#   -i       interactive root shell on the console instead of a command
#
# Exit status: the command's own, or
#   121 the -r RDMA setup failed       123 not set up (make vm-setup) / no qemu
#   122 VM lock not acquired in time   124 timed out (-t)
#   125 the guest died (panic, qemu failure) without reporting a status
#   126 the working directory is missing in the guest
#   130 interrupted (INT/TERM/HUP); the guest was stopped
#   2   usage error
#
# The command's stdout+stderr are streamed to stdout; the guest console goes
# to <run dir>/console.log and is printed to stderr when the run fails; a
# failed command also leaves the guest's dmesg in <run dir>/dmesg.txt.
#
# Environment: UCMD_VM_CACHE (default <repo>/.cache/vm), UCMD_VM_SMP (2, or
# 1 where this process may run on one CPU only),
# UCMD_VM_MEM (MiB, 2048), UCMD_VM_LOCK (/tmp/ucmd-vm.lock), UCMD_VM_LOCK_WAIT
# (seconds, 3600), UCMD_VM_LOCK_HELD=1 when the caller already holds the lock
# (a driver that boots two guests at once).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${UCMD_VM_CACHE:-$REPO/.cache/vm}

usage() { sed -n '6,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
say() { echo "vm: $*" >&2; }

TIMEOUT=600 OUT='' KEEP='' RDMA='' NAME=ucmd-vm VERBOSE='' INTERACTIVE=
RW=() EXTRA=()
while getopts ":t:o:w:rn:q:vi" opt; do
  case $opt in
    t) TIMEOUT=$OPTARG ;;
    o) OUT=$OPTARG KEEP=1 ;;
    w) [ -d "$OPTARG" ] || { say "-w $OPTARG: not a directory"; exit 2; }
       RW+=("$(realpath "$OPTARG")") ;;
    r) RDMA=1 ;;
    n) NAME=$OPTARG ;;
    q) read -ra more <<< "$OPTARG"; EXTRA+=("${more[@]}") ;;
    v) VERBOSE=1 ;;
    i) INTERACTIVE=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ -n "$INTERACTIVE" ] || [ $# -gt 0 ] || usage

# paths travel on the kernel command line, space- and comma-separated
case "$HERE$CACHE${RW[*]:-}" in *[[:space:],]*)
  say "paths with spaces or commas are not supported: $HERE, $CACHE ${RW[*]:-}"; exit 123 ;;
esac
command -v qemu-system-x86_64 >/dev/null || { say "qemu-system-x86_64 not installed: run 'make vm-setup'"; exit 123; }
KVER=$(cat "$CACHE/kver" 2>/dev/null)
for f in "$CACHE/vmlinux" "$CACHE/initramfs.cpio.gz" "$CACHE/lib/modules/$KVER/modules.dep"; do
  if [ -z "$KVER" ] || [ ! -f "$f" ]; then
    say "VM cache incomplete (${f#"$CACHE"/}): run 'make vm-setup'"
    exit 123
  fi
done

# One VM at a time on this machine: TCG guests saturate the cores, and
# parallel callers (other test runs) queue here instead.
if [ "${UCMD_VM_LOCK_HELD:-}" != 1 ]; then
  LOCK=${UCMD_VM_LOCK:-/tmp/ucmd-vm.lock}
  exec 9>>"$LOCK"
  if ! flock -n 9; then
    say "waiting for the VM lock $LOCK (another VM is running)"
    flock -w "${UCMD_VM_LOCK_WAIT:-3600}" 9 || { say "VM lock not acquired"; exit 122; }
  fi
fi

if [ -z "$OUT" ]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/ucmd-vm.XXXXXX")
else
  mkdir -p "$OUT"
  OUT=$(realpath "$OUT")
fi
rm -rf "$OUT/rc" "$OUT/started" "$OUT/scratch" "$OUT/dmesg.txt"
: > "$OUT/output"
: > "$OUT/console.log"

if [ -z "$INTERACTIVE" ]; then
  {
    printf 'cd %q || exit 126\n' "$PWD"
    [ -n "$RDMA" ] && printf '%q || exit 121\n' "$HERE/guest-rdma.sh"
    printf 'exec'; printf ' %q' "$@"; printf '\n'
  } > "$OUT/cmd.sh"
fi

rwlist=$(IFS=,; echo "${RW[*]}")
loglevel=quiet
[ -n "$VERBOSE" ] && loglevel=loglevel=7
append="console=ttyS0 panic=-1 $loglevel ucmdvm.stage2=${UCMD_VM_STAGE2:-$HERE/stage2.sh}"
append+=" ucmdvm.moddir=$CACHE/lib/modules/$KVER ucmdvm.name=$NAME"
[ -n "$rwlist" ] && append+=" ucmdvm.rw=$rwlist"
[ -n "$INTERACTIVE" ] && append+=" ucmdvm.interactive=1"

# No more vCPUs than the host CPUs we may use: each vCPU is a host thread,
# and a guest vCPU that waits for the other (a spinlock it holds, a TLB
# shootdown it must answer) spins while that one is descheduled. Two vCPUs
# on one host CPU made make deb-test ten times slower (296 s of its 300 s
# limit, against 28.5 s with one vCPU and 30.7 s with two on two CPUs).
cpus=$(nproc)
smp=${UCMD_VM_SMP:-$((cpus < 2 ? cpus : 2))}

# shellcheck disable=SC2054 # the commas are qemu's
qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max
  -smp "$smp" -m "${UCMD_VM_MEM:-2048}"
  -nodefaults -no-user-config -display none -no-reboot
  -kernel "$CACHE/vmlinux" -initrd "$CACHE/initramfs.cpio.gz"
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
  -virtfs "local,path=$OUT,mount_tag=out,security_model=none")
for i in "${!RW[@]}"; do
  qemu+=(-virtfs "local,path=${RW[$i]},mount_tag=rw$i,security_model=none")
done
qemu+=("${EXTRA[@]}" -append "$append")

# timeout puts qemu in its own process group, out of reach of a Ctrl-C or of
# a killed parent: stop it explicitly rather than leave a VM spinning
qpid=''
# shellcheck disable=SC2317 # invoked by the trap
stop() {
  trap - INT TERM HUP
  [ -n "$qpid" ] && kill -TERM "$qpid" 2>/dev/null && wait "$qpid"
  say "interrupted; guest stopped (run dir: $OUT)"
  exit 130
}
trap stop INT TERM HUP

t0=$(date +%s.%N)
if [ -n "$INTERACTIVE" ]; then
  timeout --foreground -k 5 "$TIMEOUT" "${qemu[@]}" -serial mon:stdio
  qrc=$?
else
  timeout -k 5 "$TIMEOUT" "${qemu[@]}" -serial "file:$OUT/console.log" < /dev/null &
  qpid=$!
  # stream the command's output (and with -v the console) while it runs;
  # tail --pid does a last read after qemu is gone
  tail -n +1 -F --pid=$qpid "$OUT/output" 2>/dev/null &
  tails=($!)
  if [ -n "$VERBOSE" ]; then
    tail -n +1 -F --pid=$qpid "$OUT/console.log" >&2 2>/dev/null &
    tails+=($!)
  fi
  wait $qpid
  qrc=$?
  wait "${tails[@]}"
fi
since() { echo "$1 $t0" | awk '{ printf "%.1f", $1 - $2 }'; }
wall=$(since "$(date +%s.%N)")

if [ -f "$OUT/rc" ]; then
  rc=$(cat "$OUT/rc")
  # boot-to-command on the host clock: when stage 2 wrote "started"
  say "exit status $rc; command started $(since "$(date -r "$OUT/started" +%s.%N)") s after qemu" \
    "($(cat "$OUT/started") s guest uptime); wall $wall s"
else
  case $qrc in
    124 | 137) rc=124; say "timed out after $TIMEOUT s (wall $wall s)" ;;
    *) rc=125; say "guest died without reporting a status (qemu status $qrc, wall $wall s)" ;;
  esac
fi
if [ "$rc" != 0 ]; then
  if [ -z "$VERBOSE" ] && [ -s "$OUT/console.log" ]; then
    say "guest console (last 40 lines):"
    tail -n 40 "$OUT/console.log" | sed 's/^/  console| /' >&2
  fi
  KEEP=1
fi
if [ -n "$KEEP" ]; then
  say "run dir: $OUT"
else
  rm -rf "$OUT"
fi
exit "$rc"
