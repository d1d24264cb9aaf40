"""Answers of Slurm 22.05's commands, recorded on the single-node test cluster (2026-11-23), for
tests of the parsing. QOSMaxJobsPerUserLimit needs accounting with QOS limits, which the test
cluster has not: that line is the RUNNING record below with its state and reason replaced."""

SCONTROL_RUNNING = (
    "JobId=5 JobName=baton-fill UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901755 "
    "Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:02 TimeLimit=00:01:00 "
    "TimeMin=N/A SubmitTime=2026-11-23T23:27:51 EligibleTime=2026-11-23T23:27:51 "
    "AccrueTime=2026-11-23T23:27:51 StartTime=2026-11-23T23:27:51 EndTime=2026-11-23T23:28:51 "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-23T23:27:51 "
    "Scheduler=Backfill Partition=debug AllocNode:Sid=localhost:5232 ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=8 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=8,node=1,billing=8 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* "
    "CoreSpec=* MinCPUsNode=8 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) "
    "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) "
    "Command=(null) WorkDir=/tmp/a dir with spaces Comment=fill-0000  StdErr=/tmp/slurm-5.out "
    "StdIn=/dev/null StdOut=/tmp/slurm-5.out Power= "
)
SCONTROL_PENDING_RESOURCES = (
    "JobId=6 JobName=baton-jrec-0001 UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901754 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=Resources "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 "
    "TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-23T23:27:51 "
    "EligibleTime=2026-11-23T23:27:51 AccrueTime=2026-11-23T23:27:51 "
    "StartTime=2026-11-23T23:28:51 EndTime=2026-11-23T23:29:51 Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-11-23T23:27:52 Scheduler=Main Partition=debug "
    "AllocNode:Sid=localhost:5232 ReqNodeList=(null) ExcNodeList=(null) NodeList= "
    "SchedNodeList=vm NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=2,mem=21695M,node=1,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=2 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp "
    "Comment=jrec-0001  StdErr=/tmp/slurm-6.out StdIn=/dev/null StdOut=/tmp/slurm-6.out Power= "
)
SCONTROL_PENDING_PRIORITY = SCONTROL_PENDING_RESOURCES.replace(
    "JobId=6 JobName=baton-jrec-0001", "JobId=7 JobName=baton-jrec-0002"
).replace("Reason=Resources", "Reason=Priority")
SCONTROL_PENDING_QOS = SCONTROL_PENDING_RESOURCES.replace(
    "Reason=Resources", "Reason=QOSMaxJobsPerUserLimit"
)
SCONTROL_COMPLETED = SCONTROL_PENDING_RESOURCES.replace(
    "JobState=PENDING Reason=Resources", "JobState=COMPLETED Reason=None"
)
SCONTROL_INVALID = "slurm_load_jobs error: Invalid job id specified\n"
SQUEUE_NAMED = "6|PENDING|Resources|baton-jrec-0001|jrec-0001\n"
SQUEUE_SEVERAL = (
    "2|COMPLETED|None|baton-jsmoke-0000|jsmoke-0000\n"
    "4|RUNNING|None|baton-jsmoke-0000|jsmoke-0000\n"
    "3|COMPLETED|None|baton-jsmoke-0000|jsmoke-0000\n"
)
SBATCH_BAD_PARTITION = (
    "sbatch: error: invalid partition specified: nope\n"
    "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
)
SBATCH_BUSY = (
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"
)
SACCT_DISABLED = "Slurm accounting storage is disabled\n"
