#include "deploy/launch/slurm.h"

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "deploy/launch/child.h"
#include "deploy/launch/launcher.h"
#include "deploy/launch/plan.h"

namespace ps {
namespace launch {
namespace {

// Every step shares the allocation: the daemons run at once for the whole job, and a plain srun
// step would take every CPU of the job and leave the next one waiting.
constexpr char kStepFlags[] = "--overlap";

std::string Flags(const google::protobuf::RepeatedPtrField<std::string>& flags) {
  std::string out;
  for (const std::string& f : flags) absl::StrAppend(&out, " ", ShellQuote(f));
  return out;
}

}  // namespace

std::string SlurmScript(const ClusterSpec& cluster, const config::Job& job,
                        const std::string& run_dir, const std::string& work_dir) {
  const Slurm& slurm = cluster.slurm();
  const uint32_t servers = job.cluster().num_servers();
  const uint32_t workers = job.cluster().num_workers();
  std::string s = "#!/bin/bash\n";
  absl::StrAppend(&s, "#SBATCH --job-name=ps-", job.name(), "\n");
  absl::StrAppend(&s, "#SBATCH --nodes=", slurm.nodes(), "\n");
  absl::StrAppend(&s, "#SBATCH --ntasks=", 1 + servers + workers, "\n");
  absl::StrAppend(&s, "#SBATCH --output=", run_dir, "/logs/sbatch.log\n");
  if (!slurm.partition().empty())
    absl::StrAppend(&s, "#SBATCH --partition=", slurm.partition(), "\n");
  if (!slurm.time().empty()) absl::StrAppend(&s, "#SBATCH --time=", slurm.time(), "\n");
  if (!slurm.account().empty()) absl::StrAppend(&s, "#SBATCH --account=", slurm.account(), "\n");
  for (const std::string& option : slurm.sbatch_options()) {
    absl::StrAppend(&s, "#SBATCH ", option, "\n");
  }
  const std::string timeout = absl::StrCat("--connect_timeout_s=", cluster.connect_timeout_s());
  absl::StrAppend(
      &s,
      "# Written by ps_launch: the coordinator on the first node, then the servers and the\n"
      "# workers, each kind one srun step; the workers' status is the job's.\n",
      "set -u\n", "run=", ShellQuote(run_dir), "\n", "bin=", ShellQuote(cluster.bin_dir()), "\n",
      "cd ", ShellQuote(work_dir), " || exit 1\n");
  if (!cluster.lib_dir().empty()) {
    absl::StrAppend(&s, "export LD_LIBRARY_PATH=", ShellQuote(cluster.lib_dir()),
                    "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n");
  }
  absl::StrAppend(
      &s, "finish() { echo \"$1\" > \"$run/exit_status\"; exit \"$1\"; }\n",
      "first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n",
      "rm -f \"$run/coordinator.port\"\n",
      "srun --job-name=ps_coordinator --nodes=1 --ntasks=1 --nodelist=\"$first\" ", kStepFlags,
      " --output=\"$run/logs/coordinator.log\" \"$bin/server/coordinator/ps_coordinator\" "
      "--job=\"$run/job.pbtxt\" --listen=0.0.0.0:",
      cluster.coordinator_port(), " --port_file=\"$run/coordinator.port\"",
      Flags(cluster.coordinator_flags()), " &\n", "coordinator=$!\n", "for _ in $(seq 1 ",
      // The port file, and the log line after it: srun writes the step's output to the log
      // behind the process, later than the port file under load.
      cluster.connect_timeout_s() * 10, "); do\n",
      "  [ -s \"$run/coordinator.port\" ] &&\n",
      "    grep -qs '^ps_coordinator listening on ' \"$run/logs/coordinator.log\" && break\n",
      "  kill -0 $coordinator 2>/dev/null || { echo \"ps_launch: the coordinator exited\"; "
      "finish 1; }\n",
      "  sleep 0.1\n", "done\n",
      "address=$(sed -n 's/^ps_coordinator listening on //p' \"$run/logs/coordinator.log\" | "
      "tail -n 1)\n",
      "[ -n \"$address\" ] || { echo \"ps_launch: the coordinator did not listen within ",
      cluster.connect_timeout_s(), " s\"; kill $coordinator; finish 1; }\n",
      "echo \"ps_launch: coordinator on $first listening on $address\"\n",
      "srun --job-name=ps_server --ntasks=", servers, " ", kStepFlags,
      " --output=\"$run/logs/server%t.log\" \"$bin/server/ps_server\" "
      "--coordinator=\"$address\" --listen=0.0.0.0:0 ",
      timeout, Flags(cluster.server_flags()), " &\n", "servers=$!\n",
      "srun --job-name=ps_worker --ntasks=", workers, " ", kStepFlags);
  if (slurm.gpus_per_worker() > 0) {
    absl::StrAppend(&s, " --gpus-per-task=", slurm.gpus_per_worker());
  }
  // A worker's rank is its task's index in the step; bash expands it on the node.
  absl::StrAppend(
      &s,
      " --output=\"$run/logs/worker%t.log\" bash -c 'run=$1; shift; exec \"$0\" \"$@\" "
      "--rank=$SLURM_PROCID --metrics_file=\"$run/logs/metrics$SLURM_PROCID.jsonl\"' "
      "\"$bin/worker/ps_worker\" \"$run\" "
      "--coordinator=\"$address\" --listen=0.0.0.0:0 ",
      timeout, slurm.gpus_per_worker() == 0 ? " --backend=cpu" : "", Flags(cluster.worker_flags()),
      "\n", "status=$?\n",
      "echo \"ps_launch: workers ended with status $status; stopping the servers and the "
      "coordinator\"\n",
      "kill -TERM $servers $coordinator 2>/dev/null\n", "wait\n", "finish $status\n");
  return s;
}

std::string SlurmJobState(const std::string& job_id) {
  absl::StatusOr<Captured> out =
      RunCaptured({"squeue", "-h", "-j", job_id, "-o", "%T"}, absl::Seconds(30));
  if (!out.ok()) return out.status().ToString();
  const std::string state(absl::StripAsciiWhitespace(out->output));
  if (!ExitedCleanly(out->status) || state.empty()) return "ended";
  return state;
}

std::string SlurmJobSteps(const std::string& job_id) {
  absl::StatusOr<Captured> out =
      RunCaptured({"squeue", "-h", "-s", "-j", job_id, "-o", "%i %j %N"}, absl::Seconds(30));
  if (!out.ok() || !ExitedCleanly(out->status)) return "";
  return out->output;
}

bool CancelSlurmJob(const std::string& job_id) {
  absl::StatusOr<Captured> out = RunCaptured({"scancel", job_id}, absl::Seconds(30));
  return out.ok() && ExitedCleanly(out->status);
}

int RunSlurm(const ClusterSpec& cluster, const config::Job& job, const std::string& run_dir,
             LaunchedRun run) {
  const std::string absolute = std::filesystem::absolute(run_dir).string();
  const std::string work_dir =
      cluster.work_dir().empty() ? std::filesystem::current_path().string() : cluster.work_dir();
  const std::string script_path = absl::StrCat(absolute, "/job.sbatch");
  std::ofstream(script_path) << SlurmScript(cluster, job, absolute, work_dir);
  absl::StatusOr<Captured> submitted =
      RunCaptured({"sbatch", "--parsable", script_path}, absl::Seconds(60));
  if (!submitted.ok() || !ExitedCleanly(submitted->status)) {
    Say(absl::StrCat("sbatch failed: ",
                     submitted.ok() ? submitted->output : submitted.status().ToString()));
    return 1;
  }
  // --parsable prints "id" or "id;cluster".
  const std::string id(absl::StripAsciiWhitespace(
      std::vector<std::string>(absl::StrSplit(submitted->output, ';'))[0]));
  run.set_slurm_job_id(id);
  if (absl::Status written = WriteRun(run_dir, run); !written.ok()) Say(written.ToString());
  Say(absl::StrCat("submitted Slurm job ", id, " (", script_path, "); logs in ", absolute,
                   "/logs"));

  std::string last_state;
  while (true) {
    if (const int signal = TakeSignal(absl::Seconds(1)); signal != 0) {
      Say(absl::StrCat("signal ", signal, ": cancelling Slurm job ", id));
      CancelSlurmJob(id);
      return 128 + signal;
    }
    const std::string state = SlurmJobState(id);
    if (state != last_state) Say(absl::StrCat("Slurm job ", id, ": ", state));
    last_state = state;
    if (state == "ended") break;
  }
  int status = 1;
  const std::string text(absl::StripAsciiWhitespace(ReadFile(absolute + "/exit_status")));
  if (!absl::SimpleAtoi(text, &status)) {
    Say(absl::StrCat("the job ended without writing its status (cancelled, or out of time?); see ",
                     absolute, "/logs/sbatch.log"));
    status = 1;
  }
  for (absl::string_view line : absl::StrSplit(ReadFile(absolute + "/logs/worker0.log"), '\n')) {
    if (absl::StartsWith(line, "RESULT ")) {
      std::printf("%s\n", std::string(line).c_str());
    }
  }
  std::fflush(stdout);
  Say(absl::StrCat("Slurm job ", id, ": the workers ended with status ", status));
  return status;
}

}  // namespace launch
}  // namespace ps
