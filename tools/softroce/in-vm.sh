#!/bin/sh
# What `make bench-softroce` runs inside the VM (after guest.sh brought rxe0 up):
# the RDMA suite on the rxe device (loopback: two QPs on one device), the same through
# `netbench serve` + --peer (two processes, the two-host path), and the perftest cross-check.
# The fabric sweep needs several rxe devices: it boots its own guests (tools/softroce/fabric.sh).
# Rows go to $OUT as JSON lines; the host imports them into its Parquet store.
cd "$(dirname "$0")/../.."
export PYTHONPATH=$(pwd)
PY=/usr/bin/python3
rc=0
echo "=== netbench RDMA suite, loopback on $NETBENCH_RDMA_DEV"
$PY -m netbench run suites/rdma-ci.toml --jsonl "$OUT/rdma-loopback.jsonl" --label softroce || rc=1
echo "=== netbench RDMA suite through netbench serve (--peer $NETBENCH_RDMA_ADDR)"
$PY -m netbench serve --bind "$NETBENCH_RDMA_ADDR" --port 5301 --quiet >/dev/null &
spid=$!
$PY -m netbench run suites/rdma-ci.toml --peer "$NETBENCH_RDMA_ADDR:5301" \
  --jsonl "$OUT/rdma-peer.jsonl" --label softroce-peer || rc=1
kill $spid; wait $spid 2>/dev/null
echo "=== bandwidth rows carry per-window samples (what compare tests)"
$PY tools/softroce/samples.py "$OUT/rdma-loopback.jsonl" "$OUT/rdma-peer.jsonl" || rc=1
echo "=== RDMA faults: bad device, port, GID, a peer with a wrong rkey, a peer killed mid-run"
$PY tools/softroce/faults.py "$NETBENCH_RDMA_DEV" "$NETBENCH_RDMA_ADDR" "$OUT" || rc=1
rm -f "$OUT/faults.jsonl"      # failed-on-purpose rows stay out of the store
echo "=== cross-check against perftest: same device, alternating rounds, gated on the ratios"
$PY bench/rdma_vs_perftest.py --device "$NETBENCH_RDMA_DEV" --addr "$NETBENCH_RDMA_ADDR" \
  --rounds "${CROSSCHECK_ROUNDS:-2}" --out "$OUT" --gate || rc=1
exit $rc
