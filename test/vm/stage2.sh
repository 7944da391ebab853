#!/bin/sh
# Stage-2 init: PID 1 in the guest, on the host's root filesystem (9p
# read-only + tmpfs overlay, so writes vanish at power-off), set up by init.
# Runs the command run.sh wrote to /out/cmd.sh, records its exit status in
# /out/rc, powers off. Only shell builtins besides the command itself: every
# program started here is loaded over 9p, which costs ~0.1 s under TCG.
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
# lets tests know they are in the guest, and where to keep results
export UCMD_VM_GUEST=1 UCMD_VM_SCRATCH=/out/scratch

read -r cmdline < /proc/cmdline
case " $cmdline " in *" ucmdvm.interactive=1 "*) interactive=1 ;; *) interactive= ;; esac

read -r up _ < /proc/uptime
echo "$up" > /out/started
if [ -n "$interactive" ]; then
  echo "vm-stage2: interactive shell; 'exit N' powers off with status N" > /dev/console
  setsid -c sh -i < /dev/ttyS0 > /dev/ttyS0 2>&1
  rc=$?
else
  sh /out/cmd.sh < /dev/null >> /out/output 2>&1
  rc=$?
fi
# a failure's kernel messages at every level (the console has only errors)
[ "$rc" = 0 ] || dmesg > /out/dmesg.txt 2>&1
# /out is mounted without a cache: the host has the status once echo returns
echo "$rc" > /out/rc
read -r up _ < /proc/uptime
echo "vm-stage2: done rc=$rc at $up s" > /dev/console

# sysrq needs no userspace poweroff tool (the host's is systemctl); then spin
# on builtins: /bin is on 9p, which the power-off is tearing down, and PID 1
# must not exit (that panics the kernel)
echo o > /proc/sysrq-trigger
while :; do :; done
