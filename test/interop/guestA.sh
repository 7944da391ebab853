#!/bin/sh
# Guest A of `make interop` (run by test/vm/run2.sh): the kernel's CM.
# Brings up rxe0 on the link to B, loads rdma_ucm (rdma_cm + ib_cm), then
# runs the commands that B's test asks for, in the background, until B
# writes "stop":
#   $S/req.N      a command line (B writes it via temp file + mv), N = 0, 1, ...
#   $S/out.N      its stdout and stderr, as it runs
#   $S/rc.N       its exit status, once it has exited
# Commands still running at "stop" are killed (servers run until then).
# Exit status: non-zero if the setup failed or B never said stop.
set -u
S=${UCMD_VM_SHARED:?run by test/vm/run2.sh}
HERE=$(cd "$(dirname "$0")" && pwd)
mark() { cut -d" " -f1 /proc/uptime > "$S/.$1.tmp" && mv "$S/.$1.tmp" "$S/$1"; }

"$HERE/../vm/guest-net.sh" 192.168.77.1/24 || exit 1
modprobe rdma_ucm || { echo "guestA: modprobe rdma_ucm failed"; exit 1; }
[ -d /sys/module/ib_cm ] || { echo "guestA: ib_cm not loaded"; exit 1; }
chmod 0666 /dev/infiniband/rdma_cm
mark A.ready
echo "guestA: kernel CM ready (ib_cm, rdma_cm, rdma_ucm)"

n=0 pids='' waited=0
while [ ! -e "$S/stop" ]; do
  if [ -e "$S/req.$n" ]; then
    cmd=$(cat "$S/req.$n")
    echo "guestA: [$n] $cmd"
    (
      sh -c "$cmd" > "$S/out.$n" 2>&1
      echo $? > "$S/.rc.$n.tmp" && mv "$S/.rc.$n.tmp" "$S/rc.$n"
    ) &
    pids="$pids $!"
    n=$((n + 1))
    continue
  fi
  sleep 0.05
  waited=$((waited + 1))
  # 20 minutes without a stop: B is gone
  [ $waited -lt 24000 ] || { echo "guestA: no stop from B"; exit 1; }
done
# the servers (and their subshells) we started
for p in $pids; do pkill -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
wait
i=0
while [ $i -lt $n ]; do
  echo "guestA: [$i] rc $(cat "$S/rc.$i" 2>/dev/null || echo killed)"
  sed "s/^/guestA: [$i] /" "$S/out.$i"
  i=$((i + 1))
done
dmesg > /out/dmesg.txt
echo "guestA: done"
