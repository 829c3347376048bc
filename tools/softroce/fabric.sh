#!/bin/sh
# In each of several guests (NODES=3 tools/softroce/run-vm.sh tools/softroce/fabric.sh): one
# rank of a fabric sweep, started with torchrun's environment. Every guest is its own host with
# its own kernel and its own rxe0 on its own NIC; the ranks meet through netbench's own
# rendezvous on node 0 (no torch in the guest's path) and sweep rdma.write_bw between every
# pair, both directions, through the in-process far ends.
#
# The known answer: the last guest's egress is shaped with tc tbf to SLOW_MBIT, well under what
# the emulated rxe moves unshaped. The sweep must flag exactly that host, as slow sending with
# every peer, measure its shaped pairs at 0.90-1.0 of the rate (RoCE's headers are 5% of a
# 1024-byte packet: 0.945 is the most there is), and flag nothing else. Node 0 writes the
# rows to $OUT/fabric.jsonl and the verdicts to $OUT/fabric-verdicts.json.
cd "$(dirname "$0")/../.."
node=${NETBENCH_NODE:-0} nodes=${NETBENCH_NODES:-1}
[ "$nodes" -gt 2 ] || { echo "fabric.sh: run it in three or more guests (NODES=3 run-vm.sh)"; exit 2; }
VPY=$(pwd)/.venv/bin/python            # numpy and pandas for the schedule and the verdicts
[ -x "$VPY" ] || { echo "no .venv (run make setup first): fabric sweep not run"; exit 1; }
SLOW_MBIT=20
if [ "$node" = $((nodes - 1)) ]; then
  dev=$(ip -o addr show to "$NETBENCH_RDMA_ADDR" | awk '{print $2}')
  tc qdisc add dev "$dev" root tbf rate ${SLOW_MBIT}mbit burst 32kb latency 100ms \
    || { echo "FAIL fabric sweep: cannot shape $dev"; exit 1; }
  echo "[guest] $(hostname): egress of $dev shaped to $SLOW_MBIT Mbit/s"
fi
# --threshold 0.5: a pair under half the fabric's median is slow (unshaped pairs under
# emulation spread by +-20%; the shaped ones sit near a third of the median).
RANK=$node WORLD_SIZE=$nodes LOCAL_RANK=0 TORCHELASTIC_RUN_ID=vm \
  $VPY -m netbench fabric rdma.write_bw -p msg_size=64K -p iterations=400 -p tx_depth=16 \
  -p cq_mod=4 -p validate=true --timeout 120 --rendezvous 10.99.0.1:29533 \
  --rendezvous-store builtin --bind "$NETBENCH_RDMA_ADDR" --device "$NETBENCH_RDMA_DEV" \
  --threshold 0.5 --join-timeout 300 --jsonl "$OUT/fabric.jsonl" --label softroce-fabric \
  --json > "$OUT/fabric-verdicts$node.json"
rc=$?
[ "$node" = 0 ] || exit $rc
[ $rc = 1 ] || { echo "FAIL fabric sweep: exit $rc, not 1 (one host flagged)"; exit 1; }
/usr/bin/python3 - "$OUT" "$nodes" $SLOW_MBIT <<'PY' || exit 1
import json, sys
out, n, slow_mbit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(line) for line in open(f"{out}/fabric.jsonl")]
(m,) = json.load(open(f"{out}/fabric-verdicts0.json"))["matrices"]
names = {f"softroce-vm{i}" for i in range(n)}
shaped = f"softroce-vm{n - 1}"
ok = {(r["host"], r["peer"]) for r in rows if r["status"] == "ok" and r["metric"] == "bw_avg"}
want = {(a, b) for a in names for b in names if a != b}
devices = {r["host"] for r in rows  # each its own rxe0, on its own NIC (not a dummy)
           if r["status"] == "ok" and "emulated on eth" in (r["env_rdma_device"] or "")}
hosts = {r["host"] for r in rows if r.get("env_json")}
slow = [c for c in m["cells"] if c["slow"]]
print(f"fabric rows: {len(ok & want)} of {len(want)} pairs measured bw_avg over RDMA between "
      f"{n} guests' own rxe devices; fingerprints of {len(hosts)} hosts")
for c in sorted(slow, key=lambda c: c["server"]):
    print(f"  shaped pair {c['client']} -> {c['server']}: {c['value'] * 1000:.1f} Mbit/s, "
          f"{c['value'] * 1000 / slow_mbit:.3f} of the {slow_mbit:g} Mbit/s tbf rate")
problems = []
if ok != want or hosts != names or devices != names:
    problems.append(f"pairs {sorted(want - ok)} missing, fingerprints {sorted(hosts)}, "
                    f"rxe on a NIC {sorted(devices)}")
if m["faulty_hosts"] != [{"host": shaped, "role": "sending", "slow": n - 1, "pairs": n - 1}]:
    problems.append(f"faulty hosts {m['faulty_hosts']}, want only {shaped} sending")
if m["slow_links"] or m["failed"]:
    problems.append(f"slow links {m['slow_links']}, failed {m['failed']}")
if {c["client"] for c in slow} != {shaped} or len(slow) != n - 1:
    problems.append(f"slow pairs {[(c['client'], c['server']) for c in slow]}")
for c in slow:
    if not 0.90 * slow_mbit <= c["value"] * 1000 <= slow_mbit:
        problems.append(f"{c['client']} -> {c['server']} at {c['value'] * 1000:.2f} Mbit/s, "
                        f"not 0.90-1.0 of {slow_mbit:g}")
print("\n".join(f"FAIL fabric known answer: {p}" for p in problems)
      or f"fabric known answer: exactly {shaped} flagged, slow sending with all {n - 1} peers")
sys.exit(1 if problems else 0)
PY
