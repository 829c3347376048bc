#!/bin/sh
# Instructions per round trip of rdma.write_lat (2 B, the compiled plane, loopback: both QPs
# in one thread) beside ib_write_lat (server and client, each whole under callgrind), in the
# soft-RoCE VM; the first RDMA point of docs/instructions.md:
#
#   OUT=/tmp/vmcount SKIP_INSTALL=1 tools/softroce/run-vm.sh tools/softroce/count.sh
#
# netbench runs with --instr-atstart=no: its C loops switch instrumentation on for themselves
# (_verbsloop.c's COUNT_START/COUNT_STOP), so the interpreter around them runs at valgrind's
# uninstrumented speed, which the TCG-emulated guest needs. The per-op figure is the slope
# between 1,000 and 10,000 round trips: (count at 10,000 - at 1,000) / 9,000.
cd "$(dirname "$0")/../.." || exit 2
export PYTHONPATH=$(pwd)
command -v valgrind >/dev/null || { echo "count: valgrind is not installed (apt-get install valgrind)"; exit 2; }
total() {  # the collected instructions of callgrind files: totals:, else summary:
  awk '/^totals:/ {t += $2; seen[FILENAME] = 1} /^summary:/ {s[FILENAME] = $2}
       END {for (f in s) if (!(f in seen)) t += s[f]; print t + 0}' "$@"
}
for n in 1000 10000; do
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/cg.nb.$n.%p" \
    /usr/bin/python3 -m netbench run rdma.write_lat -p msg_size=2 -p iterations=$n \
    -p warmup=0 -p data_plane=compiled --no-counters --jsonl "$OUT/count-nb-$n.jsonl" \
    > "$OUT/count-nb-$n.log" 2>&1 || { echo "count: netbench failed at $n"; exit 1; }
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.pt.$n.%p" ib_write_lat \
    -d "$NETBENCH_RDMA_DEV" -s 2 -n $n -p 18515 > "$OUT/count-pts-$n.log" 2>&1 &
  server=$!
  sleep 3
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.pt.$n.%p" ib_write_lat \
    -d "$NETBENCH_RDMA_DEV" -s 2 -n $n -p 18515 "$NETBENCH_RDMA_ADDR" \
    > "$OUT/count-ptc-$n.log" 2>&1 || { echo "count: ib_write_lat failed at $n"; exit 1; }
  wait $server
done
nb=$(( $(total "$OUT"/cg.nb.10000.*) - $(total "$OUT"/cg.nb.1000.*) ))
pt=$(( $(total "$OUT"/cg.pt.10000.*) - $(total "$OUT"/cg.pt.1000.*) ))
[ "$nb" -gt 0 ] && [ "$pt" -gt 0 ] || { echo "count: counts did not grow (netbench $nb, perftest $pt)"; exit 1; }
echo "write_lat_2 netbench $(( nb / 9000 )) ib_write_lat $(( pt / 9000 )) ratio $(awk "BEGIN {printf \"%.2f\", $nb / $pt}")"
