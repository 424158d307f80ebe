#!/usr/bin/env bash
# Brings up a one-node SLURM cluster (munge, slurmctld, slurmd) on this
# machine, as root, so that `srun -n N prog` (and `bulkwire run --launcher
# srun`) can start jobs in tests. Needs the Debian packages slurm-wlm and munge.
# The node offers 8 CPUs whatever it has, so that jobs of up to 8 tasks run
# (oversubscribed) on small machines.
set -euo pipefail
h=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge \
    /var/log/munge /etc/munge
[ -f /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged || /usr/sbin/munged --force
cat > /etc/slurm/slurm.conf <<C
ClusterName=local
SlurmctldHost=$h
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$h CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=$h Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
C
if pgrep -x slurmctld >/dev/null; then scontrol reconfigure; else slurmctld; fi
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 50); do
    sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && exit 0
    sleep 0.2
done
echo "slurm-local-up: the node did not come up" >&2
sinfo >&2 || true
exit 1
