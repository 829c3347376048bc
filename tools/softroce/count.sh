#!/bin/sh
# Instructions per operation of netbench's RDMA points beside perftest's, in the soft-RoCE VM:
# the full table of docs/instructions.md (CI's VM stage counts the headline points, in-vm.sh).
#
#   make instructions-rdma
#   = OUT=DIR tools/softroce/run-vm.sh tools/softroce/count.sh [POINTS [SCALE]]
#
# POINTS: comma-separated point names (default all); SCALE multiplies every run's size.
cd "$(dirname "$0")/../.." || exit 2
export PYTHONPATH=$(pwd)
start=$(date +%s)
/usr/bin/python3 bench/instructions_per_op.py --rdma-device "$NETBENCH_RDMA_DEV" \
  --rdma-addr "$NETBENCH_RDMA_ADDR" --only "${1:-}" --scale "${2:-1}" --out "$OUT"
rc=$?
echo "counted in $(( $(date +%s) - start )) s"
exit $rc
