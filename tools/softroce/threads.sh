#!/bin/sh
# rdma.write_bw threads=N in the soft-RoCE VM: the message rate of 64 B writes with 1, 2 and 4
# sending threads (each its own QP and CQ, both ends in this process), beside 1 thread with as
# many QPs, and the instructions each thread's loop costs a write (counted: flat in threads).
#
#   OUT=DIR tools/softroce/run-vm.sh tools/softroce/threads.sh [ITERATIONS]
cd "$(dirname "$0")/../.." || exit 2
export PYTHONPATH=$(pwd)
PY=/usr/bin/python3
n=${1:-20000}
rc=0
for spec in "threads=1 qps=1" "threads=2 qps=1" "threads=4 qps=1" "threads=1 qps=4"; do
  # shellcheck disable=SC2086
  set -- $spec
  $PY -m netbench run rdma.write_bw -p msg_size=64 -p "$1" -p "$2" -p iterations="$n" \
    -p warmup=1000 -p cq_mod=100 -p tx_depth=128 --repeat 3 --no-counters \
    --jsonl "$OUT/threads.jsonl" --json > "$OUT/threads-$1-$2.json" || rc=1
  $PY - "$OUT/threads-$1-$2.json" "$spec" <<'PYEOF'
import json, statistics, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["metric"] == "msg_rate"]
rates = [r["value"] for r in rows]
print(f"{sys.argv[2]:20s} msg_rate Mpps: median {statistics.median(rates):.4f} "
      f"of {len(rates)} repeats {[round(x, 4) for x in rates]}")
PYEOF
done
$PY bench/instructions_per_op.py --rdma-device "$NETBENCH_RDMA_DEV" --rdma-addr "$NETBENCH_RDMA_ADDR" \
  --only rdma_write_rate_64,rdma_write_rate_64_threads4 --scale 0.5 --timeout 900 --out "$OUT" || rc=1
exit $rc
