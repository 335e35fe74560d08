// ps_ctl: the command-line tool for operators.
//
//   ps_ctl validate JOB_FILE        check a job file; prints a summary or `file:line:col: error`
//
// Exit status: 0 on success, 1 when the command failed, 2 on a usage error.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "common/job_config.h"

namespace {

int Validate(const std::string& path) {
  const absl::StatusOr<ps::config::Job> job = ps::LoadJobFile(path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  std::printf("%s: job \"%s\" is valid\n", path.c_str(), job->name().c_str());
  for (const auto& t : job->tables()) {
    std::printf("  table %-16s dim %-5u optimizer %s\n", t.name().c_str(), t.dim(),
                t.optimizer().type().c_str());
  }
  const auto& c = job->cluster();
  std::printf("  cluster: %u servers, %u workers, %u shards, replication %u\n", c.num_servers(),
              c.num_workers(), c.num_shards(), c.replication_factor());
  const char* modes[] = {"sync", "bounded_staleness", "async"};
  std::printf("  training: %s, batch %u\n", modes[job->training().mode()],
              job->training().batch_size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_ctl validate JOB_FILE");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() == 3 && std::string(args[1]) == "validate") return Validate(args[2]);
  std::fprintf(stderr, "usage: ps_ctl validate JOB_FILE\n");
  return 2;
}
