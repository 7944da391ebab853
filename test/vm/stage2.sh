#!/bin/sh
# Stage-2 init: PID 1 in the guest, on the host's root filesystem (9p
# read-only + tmpfs overlay, so writes vanish at power-off). Runs the command
# run.sh wrote to /out/cmd.sh, records its exit status in /out/rc, powers off.
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
# lets tests know they are in the guest, and where to keep results
export UCMD_VM_GUEST=1 UCMD_VM_SCRATCH=/out/scratch

say() { echo "vm-stage2: $*" > /dev/console; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
arg() { sed -n "s/.*ucmdvm\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }

off() {
  sync
  umount /out 2>/dev/null
  # sysrq needs no userspace poweroff tool; the host root may not have one
  echo o > /proc/sysrq-trigger
  # spin on builtins: /bin is on 9p, which the power-off is tearing down,
  # and PID 1 must not exit (that panics the kernel)
  while :; do :; done
}

mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
# no tmpfs over /tmp: the working tree may live there (a CI clone), and the
# overlay already makes /tmp writable and throw-away
for d in /run /dev/shm; do mount -t tmpfs tmpfs "$d"; done
# extra read-write host dirs at their host paths (run.sh -w)
n=0
for d in $(arg rw | tr ',' ' '); do
  mkdir -p "$d"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 "rw$n" "$d" || say "rw mount of $d failed"
  n=$((n + 1))
done
mkdir -p "$UCMD_VM_SCRATCH"
arg name > /proc/sys/kernel/hostname
ip link set lo up

uptime_s > /out/started
if [ "$(arg interactive)" = 1 ]; then
  say "interactive shell; 'exit N' powers off with status N"
  setsid -c sh -i < /dev/ttyS0 > /dev/ttyS0 2>&1
  rc=$?
else
  sh /out/cmd.sh < /dev/null >> /out/output 2>&1
  rc=$?
fi
echo "$rc" > /out/rc.tmp && mv /out/rc.tmp /out/rc
say "done rc=$rc at $(uptime_s) s"
off
