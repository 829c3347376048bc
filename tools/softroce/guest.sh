#!/bin/sh
# In the VM: load rdma_rxe, put rxe0 on a dummy netdev (10.99.0.1; the VM has no NIC), then run
# the command given. GID index 1 is the IPv4-mapped RoCE v2 GID of 10.99.0.1.
exec 2>&1
echo "[guest] up: kernel $(uname -r), $(nproc) vCPU, $(cut -d' ' -f1 /proc/uptime) s after boot"
modprobe rdma_rxe && modprobe dummy || { echo "[guest] cannot load rdma_rxe"; exit 3; }
ip link set lo up
ip link add nb0 type dummy && ip addr add 10.99.0.1/24 dev nb0 && ip link set nb0 up
rdma link add rxe0 type rxe netdev nb0 || { echo "[guest] rdma link add failed"; exit 3; }
export NETBENCH_RDMA_DEV=rxe0 NETBENCH_RDMA_ADDR=10.99.0.1 CI=true  # plain progress lines
echo "[guest] rxe0 on nb0 (10.99.0.1) ready at $(cut -d' ' -f1 /proc/uptime) s"
"$@"
rc=$?
echo "[guest] command exit $rc"
exit $rc
