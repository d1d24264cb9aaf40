#!/usr/bin/env bash
# Start a single-node Slurm on this machine for the tests (as root): munged, slurmctld, slurmd.
#
# Installs Debian's slurm-wlm and munge with apt if they are missing, writes slurm.conf into
# $BATON_SLURM_DIR (default /tmp/baton-slurm) and starts the daemons there. Idempotent: a cluster
# that already answers is reused. Prints `SLURM_CONF=<path>` last; the tests read the same path
# (tests/support/slurm.py). No cgroups: proctrack/linuxproc and task/none are enough for one node.
set -euo pipefail

DIR=${BATON_SLURM_DIR:-/tmp/baton-slurm}
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

if [ "$(id -u)" != 0 ]; then
    echo "slurm_cluster.sh: must run as root (it starts slurmd)" >&2
    exit 1
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

node_ready() {
    [ -f "$CONF" ] && timeout 10 sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

if node_ready; then
    echo "SLURM_CONF=$CONF"
    exit 0
fi

# munge: one key shared by the daemons and the commands.
if ! (munge -n | unmunge) >/dev/null 2>&1; then
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do (munge -n | unmunge) >/dev/null 2>&1 && break; sleep 0.2; done
fi

host=$(hostname -s)
cpus=$(nproc)
# More CPUs than the machine has (SlurmdParameters=config_overrides): tests on both cores of a
# small CI machine each get their own allocation instead of queueing behind one another.
declared=$(( cpus < 8 ? 8 : cpus ))
memory=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
cat >"$CONF" <<CONF
# Written by tests/support/slurm_cluster.sh: one node, no accounting, no cgroups.
ClusterName=baton
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$declared RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

# Stale daemons from an earlier configuration (by their own pid files only).
for daemon in slurmctld slurmd; do
    pidfile="$DIR/$daemon.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")" || true
        sleep 1
    fi
done

/usr/sbin/slurmctld -f "$CONF"
/usr/sbin/slurmd -f "$CONF"

for _ in $(seq 120); do
    if node_ready; then
        echo "SLURM_CONF=$CONF"
        exit 0
    fi
    sleep 0.5
done
echo "slurm_cluster.sh: the node did not become ready; logs in $DIR/log" >&2
tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
exit 1
