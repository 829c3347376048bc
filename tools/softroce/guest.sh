#!/bin/sh
# In the VM: load rdma_rxe, put rxe0 on a netdev, then run the command given. One guest: a dummy
# netdev at 10.99.0.1 (it has no NIC). Guest i of several (NETBENCH_NODES > 1): rxe<r> on its
# virtio NIC r at 10.99.<r>.<i+1>, on rail r's segment that the guests share
# (NETBENCH_RAILS="rxe0=ADDR rxe1=ADDR"). GID index 1 is the IPv4-mapped RoCE v2 GID.
exec 2>&1
node=${NETBENCH_NODE:-0} nodes=${NETBENCH_NODES:-1}
echo "[guest] up: kernel $(uname -r), $(nproc) vCPU, $(cut -d' ' -f1 /proc/uptime) s after boot"
modprobe rdma_rxe && modprobe dummy || { echo "[guest] cannot load rdma_rxe"; exit 3; }
ip link set lo up
addr=10.99.0.$((node + 1))
if [ "$nodes" -gt 1 ]; then
  modprobe virtio_net   # no udev here to load it
  # NIC r (PCI order) is on rail r: 10.99.<r>.<node+1>, rxe<r> on it.
  r=0 rails=""
  for dev in $(ls /sys/class/net | while read -r d; do
                 [ -e "/sys/class/net/$d/device" ] && echo "$d"; done); do
    ip addr add "10.99.$r.$((node + 1))/24" dev "$dev" && ip link set "$dev" up
    rdma link add "rxe$r" type rxe netdev "$dev" || { echo "[guest] rdma link add failed"; exit 3; }
    rails="$rails rxe$r=10.99.$r.$((node + 1))"
    r=$((r + 1))
  done
  [ "$r" = "${NETBENCH_NICS:-1}" ] || { echo "[guest] node $node: $r NIC(s), not ${NETBENCH_NICS:-1}"; exit 3; }
  export NETBENCH_RAILS="${rails# }"   # DEVICE=ADDR per rail
else
  ip link add nb0 type dummy
  ip addr add "$addr/24" dev nb0 && ip link set nb0 up
  rdma link add rxe0 type rxe netdev nb0 || { echo "[guest] rdma link add failed"; exit 3; }
fi
export NETBENCH_RDMA_DEV=rxe0 NETBENCH_RDMA_ADDR=$addr CI=true  # plain progress lines
echo "[guest] $(hostname): $(rdma link | awk '{printf "%s on %s; ", $2, $NF}')ready at $(cut -d' ' -f1 /proc/uptime) s"
"$@"
rc=$?
echo "[guest] command exit $rc"
exit $rc
