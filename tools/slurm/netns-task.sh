#!/bin/sh
# One srun task, one host: run a command in the network namespace of this task's rank, under a
# hostname of its own, so the tasks of `srun -N1 -n4` on one machine stand for four hosts.
#
#   NETNS_TASK_NAMESPACES="ns0 ns1 ns2 ns3" [NETNS_TASK_HOSTS="host0 host1 host2 host3"] \
#     srun -N1 -n4 tools/slurm/netns-task.sh .venv/bin/python -m netbench fabric tcp.stream
#
# Task $SLURM_PROCID enters the namespace at that place in NETNS_TASK_NAMESPACES (`ip netns
# exec`: its /etc/netns/NS/hosts, where there is one, is the task's /etc/hosts) and, with
# NETNS_TASK_HOSTS, a UTS namespace with that place's hostname. The environment srun set
# (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_JOB_ID, ...) is kept as it is.
set -eu
rank=${SLURM_PROCID:?"netns-task.sh runs under srun (SLURM_PROCID is not set)"}
pick() {  # pick N WORD...: the Nth word (from 0), or nothing
  n=$1; shift
  [ "$n" -lt "$#" ] || return 0
  shift "$n"; printf '%s' "$1"
}
# shellcheck disable=SC2086  # the lists are words on purpose
ns=$(pick "$rank" ${NETNS_TASK_NAMESPACES:?"netns-task.sh: set NETNS_TASK_NAMESPACES"})
[ -n "$ns" ] || { echo "netns-task.sh: rank $rank has no namespace in" \
  "NETNS_TASK_NAMESPACES ($NETNS_TASK_NAMESPACES)" >&2; exit 2; }
[ "$#" -gt 0 ] || { echo "netns-task.sh: no command to run" >&2; exit 2; }
# shellcheck disable=SC2086
host=$(pick "$rank" ${NETNS_TASK_HOSTS:-})
if [ -n "$host" ]; then
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi
exec ip netns exec "$ns" "$@"
