#!/bin/sh
# What `make bench-softroce` runs inside the VM (after guest.sh brought rxe0 up):
# the RDMA suite on the rxe device (loopback: two QPs on one device), the same through
# `netbench serve` + --peer (two processes, the two-host path), instructions per operation
# beside perftest's (counted), and the perftest cross-check (timed).
# The fabric sweep needs several rxe devices: it boots its own guests (tools/softroce/fabric.sh).
# Rows go to $OUT as JSON lines; the host imports them into its Parquet store.
cd "$(dirname "$0")/../.."
export PYTHONPATH=$(pwd)
PY=/usr/bin/python3
rc=0
t0=$(date +%s)
stage() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }     # where the stage's minutes go
stage "netbench RDMA suite, loopback on $NETBENCH_RDMA_DEV"
$PY -m netbench run suites/rdma-ci.toml --jsonl "$OUT/rdma-loopback.jsonl" --label softroce || rc=1
stage "netbench RDMA suite through netbench serve (--peer $NETBENCH_RDMA_ADDR)"
$PY -m netbench serve --bind "$NETBENCH_RDMA_ADDR" --port 5301 --quiet >/dev/null &
spid=$!
$PY -m netbench run suites/rdma-ci.toml --peer "$NETBENCH_RDMA_ADDR:5301" \
  --jsonl "$OUT/rdma-peer.jsonl" --label softroce-peer || rc=1
kill $spid; wait $spid 2>/dev/null
stage "bandwidth rows carry per-window samples (what compare tests)"
$PY tools/softroce/samples.py "$OUT/rdma-loopback.jsonl" "$OUT/rdma-peer.jsonl" || rc=1
stage "RDMA faults: bad device, port, GID, a peer with a wrong rkey, a peer killed mid-run"
$PY tools/softroce/faults.py "$NETBENCH_RDMA_DEV" "$NETBENCH_RDMA_ADDR" "$OUT" || rc=1
rm -f "$OUT"/faults*.jsonl      # failed-on-purpose rows stay out of the store
stage "instructions per operation beside perftest: counted, not timed (gated at 1.10x)"
# Counts do not move with the host's load or the emulator's speed, so the gate can be tight.
# Three headline points at half their sizes here (~5 minutes); the full table:
# make instructions-rdma.
$PY bench/instructions_per_op.py --rdma-device "$NETBENCH_RDMA_DEV" --rdma-addr "$NETBENCH_RDMA_ADDR" \
  --only rdma_write_lat_2,rdma_read_lat_2,rdma_write_rate_64 --scale 0.5 --timeout 600 \
  --out "$OUT" || rc=1
# The timed cross-check is gated only where timing is evidence: under KVM or on hardware, over
# enough rounds (rdma_vs_perftest.py gates nothing below 5). Under TCG a timing ratio is a
# property of the boot, not of the code: one pair's netbench/perftest ratio moved 0.5-2.2
# between boots of the same commit (write latency 0.89x on one host, 1.59x on another), while
# the rounds inside one boot agree, so an interval over them is tight and says nothing about
# that (a fresh clone: write_bw_4k 0.838 [0.837-0.840], MISS). There the ratios are shown and
# the instruction counts above, which do not move with the emulator, are the gate.
counted="instructions per operation (rdma_write_lat_2, rdma_read_lat_2, rdma_write_rate_64),"
counted="$counted <= 1.10x perftest"
if [ "${NETBENCH_VM_ACCEL:-}" = tcg ]; then
  stage "cross-check against perftest: same device, alternating rounds, timing shown, not gated"
  echo "timing ratios under TCG emulation: shown, not gated (one pair's ratio moves 0.5-2.2" \
    "between boots); the instruction counts above are the gate"
  # Four rate and bandwidth points, 2 rounds: enough to show, the stage's minutes kept.
  $PY bench/rdma_vs_perftest.py --device "$NETBENCH_RDMA_DEV" --addr "$NETBENCH_RDMA_ADDR" \
    --rounds 2 --points write_rate_64,write_bw_4k,write_bw_1m,send_bw_64k --out "$OUT" || rc=1
  echo "VM stage: gated: $counted"
  echo "VM stage: shown, not gated: timing ratios netbench/perftest (write_rate_64, write_bw_4k," \
    "write_bw_1m, send_bw_64k): under TCG emulation one pair's ratio moves 0.5-2.2 between boots"
else
  stage "cross-check against perftest: same device, alternating rounds, gated on the ratios"
  $PY bench/rdma_vs_perftest.py --device "$NETBENCH_RDMA_DEV" --addr "$NETBENCH_RDMA_ADDR" \
    --rounds 5 --out "$OUT" --gate || rc=1
  echo "VM stage: gated: $counted"
  echo "VM stage: gated: timing ratios netbench/perftest, every point, 5 rounds" \
    "(accel ${NETBENCH_VM_ACCEL:-unknown}): a point fails where its whole 90% interval misses"
fi
stage "done"
exit $rc
