#!/bin/sh
# Runs INSIDE the guest (run.sh -r does it before the command): the device
# environment every e2e test expects.
#   - cuse, rdma_rxe, ib_umad, ib_uverbs loaded; ib_cm NOT loaded (ucmd must
#     own the CM class: with ib_cm loaded umad registration of it fails);
#   - rxe0 on veth0 (10.0.0.1, umad0/uverbs0), rxe1 on veth1 (10.0.0.2,
#     umad1/uverbs1); between the two only the link-local GIDs (index 0) carry
#     MADs, because both IPv4 addresses are local to one kernel;
#   - fixed MACs, so rxe0's GID 0 is fe80::ff:fe00:1 and rxe1's fe80::ff:fe00:2;
#   - IPv6 DAD off, so the link-local GIDs are usable at once (a "tentative"
#     address makes GRH-addressed umad writes fail with ETIMEDOUT);
#   - device nodes mode 0666 (there is no udev to set them).
# Idempotent: a second run only re-checks.
set -eu

fail() { echo "guest-rdma: $*" >&2; exit 1; }
sysfs_ib=/sys/class/infiniband

# few, batched commands: each program is loaded over 9p, slow under TCG
modprobe -a cuse rdma_rxe ib_umad ib_uverbs || fail "modprobe failed"
[ ! -d /sys/module/ib_cm ] || fail "ib_cm is loaded; it would own the CM MAD class"

if [ ! -d $sysfs_ib/rxe0 ]; then
  for c in default all; do echo 0 > /proc/sys/net/ipv6/conf/$c/accept_dad; done
  # fixed MACs make the link-local GIDs the same every boot:
  # rxe0 fe80::ff:fe00:1, rxe1 fe80::ff:fe00:2
  ip -batch - <<-EOF || fail "veth setup failed"
	link add veth0 address 02:00:00:00:00:01 type veth peer name veth1 address 02:00:00:00:00:02
	addr add 10.0.0.1/24 dev veth0
	addr add 10.0.0.2/24 dev veth1
	link set veth0 up
	link set veth1 up
	EOF
  rdma link add rxe0 type rxe netdev veth0 || fail "rxe0 on veth0 failed (see dmesg)"
  rdma link add rxe1 type rxe netdev veth1 || fail "rxe1 on veth1 failed (see dmesg)"
fi

# the link-local GIDs appear once the links are up: wait up to 10 s
i=0
while :; do
  read -r g0 < $sysfs_ib/rxe0/ports/1/gids/0
  read -r g1 < $sysfs_ib/rxe1/ports/1/gids/0
  case "$g0 $g1" in fe80:*" "fe80:*) break ;; esac
  i=$((i + 1)); [ $i -le 200 ] || fail "link-local GIDs not ready: rxe0 $g0, rxe1 $g1"
  sleep 0.05
done

chmod 0666 /dev/cuse /dev/infiniband/umad* /dev/infiniband/uverbs*
echo "guest-rdma: rxe0 gid0 $g0; rxe1 gid0 $g1"
