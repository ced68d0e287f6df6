#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for trying and testing
# `normexp train -m hydra/launcher=slurm ...` without a cluster. Needs root (Debian/Ubuntu).
#
#   sudo bash scripts/slurm_local.sh start    # install slurm-wlm + munge if missing, configure, start
#   sudo bash scripts/slurm_local.sh status   # sinfo and the queue
#   sudo bash scripts/slurm_local.sh stop     # stop the daemons
#
# What `start` does: writes a munge key (if there is none) and starts munged as the munge user;
# writes /etc/slurm/slurm.conf for this machine (one node with its cores and 90 % of its memory,
# one default partition `debug`, no cgroups, no accounting daemon; finished jobs are logged to
# /var/log/slurm/jobcomp.log); starts slurmctld and slurmd; waits until `sinfo` shows the node
# idle. Exits non-zero with the daemons' last log lines if the node does not come up.
# It overwrites /etc/slurm/slurm.conf: do not run it on a machine that already belongs to a cluster.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
LOGS=/var/log/slurm

say() { echo "slurm_local: $*" >&2; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  say "installing slurm-wlm and munge from the distribution's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
}

start_munge() {
  if pgrep -x munged >/dev/null; then
    return
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
  chmod 400 /etc/munge/munge.key
  chmod 700 /etc/munge
  runuser -u munge -- /usr/sbin/munged
  munge -n | unmunge >/dev/null  # fails (and so stops this script) if munge does not work
}

write_conf() {
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGS"
  cat >"$CONF" <<EOF
# Written by normexp's scripts/slurm_local.sh: a one-node cluster on $host.
ClusterName=normexp
# the loopback address, so the node need not resolve its own name
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_idle() {
  local host state
  host=$(hostname -s)
  for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    case "$state" in
      idle*|mixed*|allocated*) say "node $host is $state"; sinfo; return 0 ;;
      down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  say "the node did not come up within 60 s (state: ${state:-none}); the daemons' logs end with:"
  tail -n 20 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
  return 1
}

start() {
  if [ "$(id -u)" != 0 ]; then
    say "needs root (it installs packages, writes /etc/slurm/slurm.conf and starts daemons)"
    exit 2
  fi
  install_packages
  start_munge
  if sinfo -h >/dev/null 2>&1 && pgrep -x slurmctld >/dev/null && pgrep -x slurmd >/dev/null; then
    say "already running"
    wait_idle
    return
  fi
  write_conf
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  wait_idle
}

stop() {
  scontrol shutdown >/dev/null 2>&1 || true
  for _ in $(seq 20); do
    pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
    sleep 0.5
  done
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  say "stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) sinfo && squeue ;;
  *) say "usage: $0 start|status|stop"; exit 2 ;;
esac
