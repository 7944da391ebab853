#!/bin/sh
# Runs INSIDE a guest of run2.sh: the virtio NIC joined to the other guest
# gets ADDR, and Soft-RoCE rxe0 runs on it. Like guest-rdma.sh it loads cuse,
# rdma_rxe, ib_umad, ib_uverbs and never ib_cm. Between two guests both GID 0
# (link-local) and GID 1 (IPv4-mapped) carry MADs: each IP is local to one
# kernel only.
# Usage: guest-net.sh IP/PREFIX      (run2.sh uses 192.168.77.1/24 for A, .2 for B)
set -eu

fail() { echo "guest-net: $*" >&2; exit 1; }
addr=${1:?usage: guest-net.sh IP/PREFIX}
ip=${addr%/*}

# DAD off before the NIC exists, so its link-local address is never tentative
for c in default all; do echo 0 > /proc/sys/net/ipv6/conf/$c/accept_dad; done
modprobe -a virtio_net cuse rdma_rxe ib_umad ib_uverbs || fail "modprobe failed"
[ ! -d /sys/module/ib_cm ] || fail "ib_cm is loaded; it would own the CM MAD class"

# no udev, so no predictable names: find the virtio-net interface
ifc=
i=0
while [ -z "$ifc" ]; do
  for d in /sys/class/net/*; do
    case $(readlink "$d/device/driver") in */virtio_net) ifc=${d##*/} ;; esac
  done
  i=$((i + 1)); [ $i -le 100 ] || fail "no virtio-net interface"
  [ -n "$ifc" ] || sleep 0.05
done

ip addr add "$addr" dev "$ifc"
ip link set "$ifc" up
rdma link add rxe0 type rxe netdev "$ifc" || fail "rxe0 on $ifc failed (see dmesg)"

# GID 0 link-local, GID 1 ::ffff:<ip>
IFS=. read -r o1 o2 o3 o4 <<EOF
$ip
EOF
want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4")
i=0
while :; do
  read -r g0 < /sys/class/infiniband/rxe0/ports/1/gids/0
  read -r g1 < /sys/class/infiniband/rxe0/ports/1/gids/1
  case $g0 in fe80:*) [ "$g1" = "$want" ] && break ;; esac
  i=$((i + 1)); [ $i -le 200 ] || fail "GIDs not ready: $g0 $g1"
  sleep 0.05
done

chmod 0666 /dev/cuse /dev/infiniband/umad* /dev/infiniband/uverbs*
echo "guest-net: $ifc $addr rxe0 gid0 $g0 gid1 $g1"
