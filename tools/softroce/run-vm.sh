#!/usr/bin/env bash
# Boot a throw-away VM with Debian's stock kernel, give it a real soft-RoCE (rdma_rxe) device,
# run a command there, and power off. For hosts whose own kernel has no RDMA (CONFIG_INFINIBAND
# unset), like this project's CI. The VM sees the host's / read-only over virtio-9p (so the
# repository, /usr/bin/python3, Debian's python3-pyverbs and python3-pluggy are all there), with throw-away
# overlays on /tmp /var /etc /root, and $OUT shared read-write for results.
#
#   tools/softroce/run-vm.sh CMD [ARGS...]     # CMD runs in the guest after rxe0 is up
#   NODES=3 NICS=2 tools/softroce/run-vm.sh CMD # three guests, each its own kernel and a
#                                              # virtio NIC per rail, rxe<r> on NIC r
#
# With NODES > 1 the guests' NIC r is on rail r, an Ethernet segment of its own: a QEMU
# multicast socket (a hub on 127.0.0.1, no root and no host bridge needed). Guest i is
# softroce-vm<i>, at 10.99.<r>.<i+1> on rail r; its log is $OUT/vm<i>.log. Every guest runs
# CMD; it reads its place from NETBENCH_NODE, NETBENCH_NODES and NETBENCH_NICS, and whether
# its CPU is emulated from NETBENCH_VM_ACCEL (tcg or kvm).
#
# Env: OUT (default /tmp/netbench-softroce/out), VCPUS=2 (with 1, busy-polling peers starve),
#      MEM=1G, VM_TIMEOUT=1500 s, SKIP_INSTALL=1 to skip apt, QEMU_EXTRA="-device ..." to add
#      emulated hardware (e.g. PCIe ports and devices).
# Under TCG emulation (no usable KVM) Python runs ~50x slower than on the host; numbers from
# this VM are functional checks of the verbs code, never performance figures.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/netbench-softroce}
OUT=${OUT:-$WORK/out}
VCPUS=${VCPUS:-2}
MEM=${MEM:-1G}
VM_TIMEOUT=${VM_TIMEOUT:-1500}   # a CPU hog beside the VM made one stage take 898 s
NODES=${NODES:-1}
NICS=${NICS:-1}
case "$NODES" in ''|*[!0-9]*|0) echo "run-vm: NODES must be a whole number >= 1, not '$NODES'"; exit 2 ;; esac
case "$NICS" in [1-4]) ;; *) echo "run-vm: NICS must be 1 to 4, not '$NICS'"; exit 2 ;; esac
[ "$NICS" = 1 ] || [ "$NODES" -gt 1 ] || { echo "run-vm: NICS > 1 needs NODES > 1"; exit 2; }
mkdir -p "$WORK" "$OUT"
T0=$(date +%s)

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  # INITRD=No: the kernel package's initramfs (~19 s to build) is not used here.
  export DEBIAN_FRONTEND=noninteractive INITRD=No
  need=""
  for pkg in qemu-system-x86 linux-image-amd64 kmod busybox-static cpio iproute2 rdma-core \
             ibverbs-providers ibverbs-utils perftest python3-pyverbs python3-pluggy; do
    dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
  done
  if [ -n "$need" ]; then
    [ "$(id -u)" = 0 ] || { echo "run-vm: needs root to install:$need"; exit 2; }
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $need >/dev/null
  fi
fi

# The newest Debian kernel with both an image and an rdma_rxe module.
KVER=$(ls /lib/modules | sort -V | while read -r k; do
  [ -f "/boot/vmlinuz-$k" ] && [ -n "$(find "/lib/modules/$k" -name 'rdma_rxe.ko*' | head -1)" ] \
    && echo "$k"; done | tail -1)
[ -n "$KVER" ] || { echo "run-vm: no /boot/vmlinuz-* with an rdma_rxe module"; exit 2; }

# Hardware KVM only with vmx/svm and a /dev/kvm that is not PVM (PVM cannot boot Debian's
# kernel: '-cpu host' aborts on MSR 0x10a); otherwise TCG software emulation.
ACCEL=tcg CPU=max
if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && [ ! -d /sys/module/kvm_pvm ]; then
  ACCEL=kvm CPU=host
fi

# A tiny initramfs: busybox plus the modules that mount the host's / over virtio-9p.
IRD=$WORK/initramfs-$KVER
rm -rf "$IRD"; mkdir -p "$IRD"/{bin,mods,proc,sys,dev,newroot}
cp /bin/busybox "$IRD/bin/busybox"
MODS="netfs fscache 9pnet 9p virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci 9pnet_virtio overlay"
for m in $MODS; do
  src=$(modinfo -k "$KVER" -n "$m" 2>/dev/null) || continue   # some are built in
  case "$src" in *.ko) cp "$src" "$IRD/mods/$m.ko" ;; *.ko.xz) xz -dc "$src" > "$IRD/mods/$m.ko" ;; esac
done
cat > "$IRD/init" <<EOF
#!/bin/busybox sh
B=/bin/busybox
\$B mount -t proc proc /proc; \$B mount -t sysfs sys /sys; \$B mount -t devtmpfs dev /dev
for m in $MODS; do [ -f /mods/\$m.ko ] && \$B insmod /mods/\$m.ko; done
\$B mount -t 9p -o trans=virtio,version=9p2000.L,access=any,msize=512000,ro hostroot /newroot || { echo "mount root failed"; \$B poweroff -f; }
for d in proc sys dev; do \$B mount --move /\$d /newroot/\$d; done
\$B mount -t tmpfs -o mode=755 run /newroot/run
for d in tmp var etc root; do
  \$B mkdir -p /newroot/run/ov/\$d/u /newroot/run/ov/\$d/w
  \$B mount -t overlay -o lowerdir=/newroot/\$d,upperdir=/newroot/run/ov/\$d/u,workdir=/newroot/run/ov/\$d/w ov_\$d /newroot/\$d
done
\$B mount -t devpts devpts /newroot/dev/pts 2>/dev/null; \$B mkdir -p /newroot/dev/shm; \$B mount -t tmpfs shm /newroot/dev/shm
\$B mount -t 9p -o trans=virtio,version=9p2000.L,access=any,msize=512000 out /newroot$OUT || echo "mount out failed"
\$B cp /cmd.sh /newroot/run/cmd.sh
exec \$B switch_root /newroot /bin/sh /run/cmd.sh
EOF
GUEST_CMD="$HERE/guest.sh"
for a in "$@"; do GUEST_CMD+=" $(printf '%q' "$a")"; done
cat > "$IRD/cmd.sh" <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OUT=$OUT
node=\$(sed -n 's/.*netbench.node=\([0-9]*\).*/\1/p' /proc/cmdline)
if [ "$NODES" -gt 1 ]; then hostname softroce-vm\$node; else hostname softroce-vm; fi
export NETBENCH_NODE=\${node:-0} NETBENCH_NODES=$NODES NETBENCH_NICS=$NICS NETBENCH_VM_ACCEL=$ACCEL
cd $(pwd)
$GUEST_CMD
echo \$? > $OUT/guest_rc\${node:-0}
sync
echo o > /proc/sysrq-trigger
sleep 30
EOF
chmod +x "$IRD/init"
(cd "$IRD" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initramfs-$KVER.cpio.gz"
rm -f "$OUT"/guest_rc*
# $OUT/shared: a scratch folder the guests of this boot share (rendezvous files), kept out
# of the results (`make bench-softroce` imports $OUT/*.jsonl only).
rm -rf "$OUT/shared" && mkdir -p "$OUT/shared"
echo "[host] kernel $KVER, accel $ACCEL, $NODES x ($VCPUS vCPU, $MEM$([ "$NODES" = 1 ] || echo ", $NICS NIC(s)")), prepared in $(( $(date +%s) - T0 )) s"
# Random per run, so two CI jobs on one machine never share a segment.
MCAST_PORT=$(( 20000 + RANDOM % 20000 ))
boot() {  # boot NODE: one guest; its console to stdout (NODES=1) or prefixed to $OUT/vm<N>.log
  local node=$1 net=() r
  if [ "$NODES" -gt 1 ]; then
    for ((r = 0; r < NICS; r++)); do
      net+=(-netdev "socket,id=n$r,mcast=230.0.99.$((r + 1)):$MCAST_PORT,localaddr=127.0.0.1"
            -device "virtio-net-pci,netdev=n$r,mac=52:54:00:99:0$r:$(printf %02x $((node + 1)))")
    done
  fi
  timeout "$VM_TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
    -machine q35,accel=$ACCEL -cpu $CPU -smp "$VCPUS" -m "$MEM" \
    -kernel "/boot/vmlinuz-$KVER" -initrd "$WORK/initramfs-$KVER.cpio.gz" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init netbench.node=$node" \
    -fsdev local,id=r,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=r,mount_tag=hostroot \
    -fsdev local,id=o,path="$OUT",security_model=none,multidevs=remap \
    -device virtio-9p-pci,fsdev=o,mount_tag=out \
    "${net[@]}" ${QEMU_EXTRA:-} -serial stdio -monitor none
}
set +e
if [ "$NODES" = 1 ]; then
  boot 0 2>&1 | tee "$OUT/vm.log"
  vm_rcs=${PIPESTATUS[0]}
else
  pids=()
  for ((i = 0; i < NODES; i++)); do
    (boot "$i" > "$OUT/vm$i.log" 2>&1; echo $? > "$OUT/qemu_rc$i") &
    pids+=($!)
  done
  # Node 0 drives (rank 0 of whatever runs); follow its console live.
  tail -n +1 -F --pid "${pids[0]}" "$OUT/vm0.log" 2>/dev/null &
  wait "${pids[@]}"
  sleep 0.5
  vm_rcs=$(cat "$OUT"/qemu_rc* 2>/dev/null | sort -u | tr '\n' ' ')
  for ((i = 1; i < NODES; i++)); do
    [ "$(cat "$OUT/guest_rc$i" 2>/dev/null)" = 0 ] && continue
    echo "[host] guest $i failed; the end of its console ($OUT/vm$i.log):"; tail -15 "$OUT/vm$i.log"
  done
fi
set -e
guest_rcs=$(for ((i = 0; i < NODES; i++)); do cat "$OUT/guest_rc$i" 2>/dev/null || echo 99; done \
  | sort -u | tr '\n' ' ')
echo "[host] VM done in $(( $(date +%s) - T0 )) s; qemu rc=${vm_rcs% }, guest rc=${guest_rcs% }"
[ "${vm_rcs% }" = 0 ] && [ "${guest_rcs% }" = 0 ]
