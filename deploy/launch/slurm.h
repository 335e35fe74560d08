// ps_launch's SLURM backend: one sbatch job runs every daemon of a job inside its allocation, one
// srun step per kind of daemon (the coordinator on the first node, then the servers, then the
// workers with their rank from SLURM_PROCID). The run folder must be on a file system every node
// sees (as Slurm's own --output files are): the job file, the logs and the coordinator's port
// file go there.
//
// Unlike LOCAL and SSH (launcher.h), a coordinator that dies is not restarted: it is an srun step
// the batch script owns, not a process of ps_launch; restarting it would take a loop in the script
// around that step (with its own limit, and a stop that reaches the step rather than the loop),
// the bound port carried from the first step to the next, and a data_dir on the nodes' shared
// file system, which RocksDB's locking does not promise to work on.
#ifndef PS_DEPLOY_LAUNCH_SLURM_H_
#define PS_DEPLOY_LAUNCH_SLURM_H_

#include <string>

#include "proto/job.pb.h"
#include "proto/launch.pb.h"

namespace ps {
namespace launch {

// The sbatch script for `job` on `cluster` (backend SLURM), with `run_dir` an absolute path. It
// writes logs/coordinator.log, logs/server<i>.log, logs/worker<rank>.log under run_dir, waits
// for the workers, stops the rest, writes the workers' exit status to run_dir/exit_status and
// exits with it.
std::string SlurmScript(const ClusterSpec& cluster, const config::Job& job,
                        const std::string& run_dir, const std::string& work_dir);

// Writes the script, submits it with sbatch, records the Slurm job id in run.pbtxt, and waits for
// the job to end (a signal cancels it with scancel). Prints worker 0's RESULT line. The exit
// status of the workers (1 when it cannot be known), 1 when sbatch fails.
int RunSlurm(const ClusterSpec& cluster, const config::Job& job, const std::string& run_dir,
             LaunchedRun run);

// squeue's state of a job ("RUNNING", "PENDING"...), or "ended" when squeue no longer lists it.
std::string SlurmJobState(const std::string& job_id);

// The job's running steps, one line each (squeue -s: step id, program, nodes), or "".
std::string SlurmJobSteps(const std::string& job_id);

// scancel; whether it succeeded.
bool CancelSlurmJob(const std::string& job_id);

}  // namespace launch
}  // namespace ps

#endif  // PS_DEPLOY_LAUNCH_SLURM_H_
