#!/bin/sh
# In the VM: a fabric sweep over the rxe device. Three ranks, each its own host (a UTS
# namespace with its own hostname), started with torchrun's environment, meet through
# netbench's own rendezvous (no torch in the guest's path) and sweep rdma.write_bw between
# every pair, both directions, through the in-process far ends; rows to $OUT/fabric.jsonl.
cd "$(dirname "$0")/../.."
VPY=$(pwd)/.venv/bin/python            # numpy and pandas for the schedule and the verdicts
[ -x "$VPY" ] || { echo "no .venv (run make setup first): fabric sweep not run"; exit 1; }
port=29533
pids=""
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 LOCAL_RANK=0 TORCHELASTIC_RUN_ID=vm unshare --uts sh -c \
    "hostname rxe-host$r && exec $VPY -m netbench fabric rdma.write_bw -p msg_size=64K \
     -p iterations=400 -p tx_depth=16 -p cq_mod=4 -p validate=true --timeout 120 \
     --rendezvous $NETBENCH_RDMA_ADDR:$port --rendezvous-store builtin \
     --bind $NETBENCH_RDMA_ADDR --device $NETBENCH_RDMA_DEV --threshold 0.9 \
     --join-timeout 300 --jsonl $OUT/fabric.jsonl --label softroce-fabric" \
    > "$OUT/fabric-rank$r.log" 2>&1 &
  pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
cat "$OUT/fabric-rank0.log"
[ $rc = 0 ] || { echo "FAIL fabric sweep: a rank failed"; tail -3 "$OUT"/fabric-rank*.log; exit 1; }
/usr/bin/python3 - "$OUT/fabric.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ok = {(r["host"], r["peer"]) for r in rows if r["status"] == "ok" and r["metric"] == "bw_avg"}
want = {(f"rxe-host{a}", f"rxe-host{b}") for a in range(3) for b in range(3) if a != b}
hosts = {r["host"] for r in rows if r.get("env_json")}
print(f"fabric rows: {len(ok)} of 6 pairs measured bw_avg over RDMA; fingerprints of "
      f"{len(hosts)} hosts")
sys.exit(0 if ok == want and hosts == {f"rxe-host{i}" for i in range(3)} else 1)
PY
