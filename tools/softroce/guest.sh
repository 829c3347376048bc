#!/bin/sh
# In the VM: load rdma_rxe, put rxe0 on a netdev, then run the command given. One guest: a dummy
# netdev at 10.99.0.1 (it has no NIC). Guest i of several (NETBENCH_NODES > 1): its virtio NIC
# at 10.99.0.<i+1>, on the segment the guests share. GID index 1 is the IPv4-mapped RoCE v2 GID.
exec 2>&1
node=${NETBENCH_NODE:-0} nodes=${NETBENCH_NODES:-1}
echo "[guest] up: kernel $(uname -r), $(nproc) vCPU, $(cut -d' ' -f1 /proc/uptime) s after boot"
modprobe rdma_rxe && modprobe dummy || { echo "[guest] cannot load rdma_rxe"; exit 3; }
ip link set lo up
addr=10.99.0.$((node + 1))
if [ "$nodes" -gt 1 ]; then
  modprobe virtio_net   # no udev here to load it
  dev=$(ls /sys/class/net | while read -r d; do
    [ -e "/sys/class/net/$d/device" ] && echo "$d"; done | head -1)
  [ -n "$dev" ] || { echo "[guest] node $node of $nodes: no NIC"; exit 3; }
else
  dev=nb0
  ip link add nb0 type dummy
fi
ip addr add "$addr/24" dev "$dev" && ip link set "$dev" up
rdma link add rxe0 type rxe netdev "$dev" || { echo "[guest] rdma link add failed"; exit 3; }
export NETBENCH_RDMA_DEV=rxe0 NETBENCH_RDMA_ADDR=$addr CI=true  # plain progress lines
echo "[guest] $(hostname): rxe0 on $dev ($addr) ready at $(cut -d' ' -f1 /proc/uptime) s"
"$@"
rc=$?
echo "[guest] command exit $rc"
exit $rc
