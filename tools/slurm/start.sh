#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests that launch ranks with a real `srun`
# (tests/test_slurm.py): munged, slurmctld and slurmd started directly (no systemd: this runs
# in containers too), then waits until `srun -N1 -n1 true` runs a job.
#
#   tools/slurm/start.sh          # as root; Debian's slurm-wlm and munge installed
#                                 # (`make slurm` installs them, then runs this)
#
# Idempotent: a second call with the daemons up and the same config only checks that a job
# runs. It writes /etc/slurm/slurm.conf (marked as its own; a config it did not write is left
# alone and the script stops, unless SLURM_START_FORCE=1) for one node, this host
# (`hostname -s`), with max(nproc, 8) CPUs so six tasks fit on a 2-core machine, jobs sharing
# the node (OverSubscribe=FORCE), no cgroups (proctrack/linuxproc, task/none), state under
# /var/spool. On failure: one line naming what did not come up, and where its log is; exit 1.
set -u
WAIT=${SLURM_START_WAIT:-60}
CONF=/etc/slurm/slurm.conf
MARK="# written by netbench tools/slurm/start.sh"
LOGDIR=/var/log/slurm

fail() { echo "tools/slurm/start.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (it starts munged, slurmctld and slurmd)"
for cmd in munged munge unmunge slurmctld slurmd srun sinfo scontrol; do
  command -v "$cmd" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
  command -v "$cmd" >/dev/null 2>&1 \
    || fail "$cmd is not installed: apt-get install slurm-wlm munge (or: make slurm)"
done
exec 9>/run/netbench-slurm-start.lock
flock -w "$WAIT" 9 || fail "another tools/slurm/start.sh holds /run/netbench-slurm-start.lock"

alive() {   # alive PIDFILE: the daemon it names runs
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}
stop() {    # stop PIDFILE: end the daemon it names (ours: we started it from this file)
  alive "$1" || return 0
  local pid; pid=$(cat "$1")
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null; return 0
}
last_log() { [ -s "$1" ] && echo "; $1: $(tail -n1 "$1")"; }

# --- munge: a key (made once), then munged as the munge user ----------------------------------
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile /etc/munge/munge.key >/dev/null 2>&1
  fi
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 \
    status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key && chmod 0755 /run/munge
if ! alive /run/munge/munged.pid; then
  runuser -u munge -- munged >/dev/null 2>&1 9>&- \
    || fail "munged did not start$(last_log /var/log/munge/munged.log)"
fi
for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 \
  || fail "munge cannot encode and decode a credential$(last_log /var/log/munge/munged.log)"

# --- slurm.conf: one node, this host -----------------------------------------------------------
node=$(hostname -s)
cpus=$(nproc); [ "$cpus" -ge 8 ] || cpus=8
mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
[ "${mem_mb:-0}" -ge 1024 ] || mem_mb=1024
want=$(cat <<EOF
$MARK: a one-node cluster for the tests
ClusterName=netbench
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
NodeName=$node CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
)
changed=0
if [ -e "$CONF" ] && ! head -n1 "$CONF" | grep -qF "$MARK" && [ "${SLURM_START_FORCE:-0}" != 1 ]; then
  fail "$CONF exists and was not written by this script: left alone (SLURM_START_FORCE=1 replaces it)"
fi
if [ "$(cat "$CONF" 2>/dev/null)" != "$want" ]; then
  mkdir -p "$(dirname "$CONF")"
  printf '%s\n' "$want" > "$CONF.tmp" && mv "$CONF.tmp" "$CONF"
  changed=1
fi
mkdir -p /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"

# --- the daemons: restarted when the config changed, started when not running --------------
if [ "$changed" = 1 ]; then
  stop /run/slurmd.pid
  stop /run/slurmctld.pid
fi
if ! alive /run/slurmctld.pid; then
  slurmctld >/dev/null 2>&1 9>&- || fail "slurmctld did not start$(last_log $LOGDIR/slurmctld.log)"
fi
if ! alive /run/slurmd.pid; then
  slurmd >/dev/null 2>&1 9>&- || fail "slurmd did not start$(last_log $LOGDIR/slurmd.log)"
fi

# --- wait (bounded) until the node is idle and a job runs ------------------------------------
deadline=$((SECONDS + WAIT))
state=unknown
while [ $SECONDS -lt $deadline ]; do
  state=$(sinfo -h -N -n "$node" -o %T 2>/dev/null | head -n1)
  case "$state" in
    idle|mixed|allocated)
      if timeout 30 srun -N1 -n1 --time=1 --job-name=netbench-start true >/dev/null 2>&1 9>&-; then
        echo "slurm: node $node up ($cpus CPUs, partition debug), srun runs jobs"
        exit 0
      fi ;;
    *drain*|down*)  # a node left down or drained by an earlier run: back into service
      scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 9>&- ;;
  esac
  sleep 1
done
fail "Slurm did not run a job within ${WAIT} s: node $node is '${state:-not known to sinfo}'" \
     "(logs: $LOGDIR/slurmctld.log, $LOGDIR/slurmd.log)$(last_log $LOGDIR/slurmd.log)"
