#!/bin/sh
# Stage 2 for a systemd boot (test/vm/boot-test.sh runs run.sh with
# UCMD_VM_STAGE2 pointing here). PID 1 on the overlay root that init set up:
# installs the ucmd package named in /out/boot.env (UCMD_DEB), enables
# ucmd.service as an administrator would, adds the test VM's own units, and
# becomes systemd:
#   ucmd-vm-rxe.service  rxe0/rxe1 (guest-rdma.sh) early in boot, the way real
#                        HCAs appear: udev then loads ib_umad and wants
#                        rdma-load-modules@rdma.service (rdma-core's rules)
#   ucmd-vm-run.service  after multi-user.target: /out/cmd.sh (run.sh's
#                        command), its status into /out/rc, then power-off
# Host units that would only slow the boot (postgresql, timers, gettys) are
# masked in the overlay; nothing outside the guest changes.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LANG=C.UTF-8

die() {
  echo "vm-stage2-systemd: $*" > /dev/console
  echo "vm-stage2-systemd: $*" >> /out/output
  echo 125 > /out/rc
  echo o > /proc/sysrq-trigger
  while :; do :; done
}

# shellcheck source=/dev/null
. /out/boot.env || die "no /out/boot.env"
dpkg -i "$UCMD_DEB" >> /out/output 2>&1 || die "dpkg -i $UCMD_DEB failed"
# UCMD_UNIT (boot-test.sh BOOT_UNIT=...): another unit file in the package's
# place, e.g. the one before issue 14, to see the boot test fail with it
if [ -n "${UCMD_UNIT:-}" ]; then
  cp "$UCMD_UNIT" /lib/systemd/system/ucmd.service || die "cp $UCMD_UNIT failed"
fi
systemctl enable ucmd.service >> /out/output 2>&1 || die "systemctl enable ucmd failed"

for u in postgresql.service e2scrub_reap.service systemd-timesyncd.service getty.target \
  serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  e2scrub_all.timer fstrim.timer man-db.timer systemd-pstore.service; do
  ln -sf /dev/null "/etc/systemd/system/$u"
done
# tmpfiles' "D /tmp" empties /tmp at boot, and the working tree may live
# there (CI clones into /tmp): keep the overlay's /tmp as it is
mkdir -p /etc/tmpfiles.d
ln -sf /dev/null /etc/tmpfiles.d/tmp.conf
# rxe is RoCE, so udev wants rdma-load-modules@roce where an InfiniBand or
# Omni-Path host (and a ConnectX one, which udev tags both InfiniBand and
# RoCE) wants @infiniband or @opa, whose module lists begin with ib_ipoib,
# which loads ib_cm: the same here, so that the boot shows ucmd ahead of
# that instance as well as of @rdma
if [ -f /etc/rdma/modules/roce.conf ]; then
  echo ib_ipoib >> /etc/rdma/modules/roce.conf
fi
here=$(dirname "$0")
cat > /etc/systemd/system/ucmd-vm-rxe.service <<UNIT
[Unit]
Description=test VM: Soft-RoCE rxe0/rxe1 appear (as HCAs do at boot)
DefaultDependencies=no
Wants=systemd-udevd.service
After=systemd-udevd.service systemd-udev-trigger.service systemd-journald.socket
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$here/guest-rdma.sh
UNIT
cat > /etc/ucmd-vm-run.sh <<'SH'
#!/bin/sh
cd / || exit 126
sh /out/cmd.sh < /dev/null >> /out/output 2>&1
rc=$?
[ "$rc" = 0 ] || dmesg > /out/dmesg.txt 2>&1
echo "$rc" > /out/rc
systemctl --no-block poweroff
SH
chmod 755 /etc/ucmd-vm-run.sh
cat > /etc/systemd/system/ucmd-vm-run.service <<'UNIT'
[Unit]
Description=test VM: the command of run.sh, then power-off
After=multi-user.target ucmd.service rdma-load-modules@rdma.service rdma-load-modules@roce.service ucmd-vm-rxe.service
[Service]
Type=oneshot
Environment=UCMD_VM_GUEST=1 UCMD_VM_SCRATCH=/out/scratch HOME=/root
ExecStart=/etc/ucmd-vm-run.sh
TimeoutStartSec=infinity
UNIT
cat > /etc/systemd/system/ucmd-vm.target <<'UNIT'
[Unit]
Description=test VM: a systemd boot with ucmd enabled
Requires=multi-user.target
Wants=ucmd-vm-rxe.service ucmd-vm-run.service
After=multi-user.target
AllowIsolate=yes
UNIT
read -r up _ < /proc/uptime
echo "$up" > /out/started
exec /lib/systemd/systemd --unit=ucmd-vm.target
