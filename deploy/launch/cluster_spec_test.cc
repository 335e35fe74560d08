#include "deploy/launch/cluster_spec.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/job_config.h"

namespace ps {
namespace launch {
namespace {

config::Job TwoByTwo() {
  config::Job job;
  job.set_name("j");
  job.mutable_cluster()->set_num_servers(2);
  job.mutable_cluster()->set_num_workers(2);
  return job;
}

constexpr char kSsh[] = R"pb(backend: SSH
                             bin_dir: "/opt/ps/bin"
                             ssh {
                               user: "ps"
                               options: [ "-i", "/keys/ps" ]
                             }
                             hosts { name: "node-a" coordinator: true servers: 1 }
                             hosts { name: "node-b" servers: 1 workers: 1 gpus: 2 }
                             hosts { name: "node-c" workers: 1 }
)pb";

TEST_CASE("a valid ssh description loads", "[cluster_spec]") {
  absl::StatusOr<ClusterSpec> c = ParseCluster(kSsh, "c.pbtxt", TwoByTwo());
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->backend() == ClusterSpec::SSH);
  CHECK(c->hosts_size() == 3);
  CHECK(c->hosts(1).gpus() == 2);
  CHECK(c->ssh().connect_timeout_s() == 10);
  CHECK(c->connect_timeout_s() == 45);
}

TEST_CASE("a local description needs only the binaries", "[cluster_spec]") {
  absl::StatusOr<ClusterSpec> c =
      ParseCluster("bin_dir: \"bazel-out/k8-opt/bin\"", "l", TwoByTwo());
  REQUIRE(c.ok());
  CHECK(c->backend() == ClusterSpec::LOCAL);
}

TEST_CASE("mistakes are named with file, line and what is wrong", "[cluster_spec]") {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::string hosts = R"(hosts { name: "a" coordinator: true servers: 1 workers: 1 }
hosts { name: "b" servers: 1 workers: 1 }
)";
  const Case cases[] = {
      {"backend: SSH\n" + hosts, "c.pbtxt:1:1: bin_dir: is required"},
      {"bin_dir: \"b\"\nbackend: SSH\nhosts { name: \"a\" coordinator: true servers: 2 }\n"
       "hosts { name: \"b\" servers: 1 workers: 2 }\n",
       "c.pbtxt:3:1: hosts: servers over all hosts add up to 3, the job's cluster.num_servers is "
       "2"},
      {"bin_dir: \"b\"\nbackend: SSH\nhosts { name: \"a\" servers: 2 workers: 2 }\n",
       "c.pbtxt:3:1: hosts: no host runs the coordinator"},
      {"bin_dir: \"b\"\nbackend: SSH\n" + hosts + "hosts { name: \"a\" }\n",
       "c.pbtxt:5:9: hosts[2] \"a\": is named twice"},
      {"bin_dir: \"b\"\nbackend: SSH\n" + hosts + "hosts { name: \"c\" }\n",
       "c.pbtxt:5:9: hosts[2] \"c\": runs nothing"},
      {"bin_dir: \"b\"\nbackend: SSH\n" + hosts + "hosts { name: \"c\" coordinator: true }\n",
       "c.pbtxt:5:19: hosts[2] \"c\": a second coordinator"},
      {"bin_dir: \"b\"\nbackend: SSH\n",
       "c.pbtxt:2:1: hosts: the SSH backend needs at least one host"},
      {"bin_dir: \"b\"\n" + hosts,
       "c.pbtxt:2:1: hosts: the LOCAL backend places the daemons itself"},
      {"bin_dir: \"b\"\nssh { user: \"x\" }\n", "c.pbtxt:2:1: ssh: is for SSH, not LOCAL"},
      {"bin_dir: \"b\"\nbackend: SSH\n" + hosts + "slurm { nodes: 2 }\n",
       "c.pbtxt:5:1: slurm: is for SLURM, not SSH"},
      {"bin_dir: \"b\"\nbackend: SLURM\nslurm { nodes: 0 }\n",
       "c.pbtxt:3:1: slurm.nodes: must be >= 1"},
      {"bin_dir: \"b\"\nconnect_timeout_s: 0\n", "c.pbtxt:2:1: connect_timeout_s: must be > 0"},
      {"bin_dir: \"b\"\ncoordinator_port: 70000\n",
       "c.pbtxt:2:1: coordinator_port: must be at most 65535"},
      {"bin_dir: \"b\"\nbackend: KUBERNETES\n",
       "c.pbtxt:2:1: Unknown enumeration value of \"KUBERNETES\""},
      {"bin_dir: \"b\"\nhost { name: \"a\" }\n",
       "c.pbtxt:2:1: Message type \"ps.launch.ClusterSpec\" has no field named \"host\""},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    absl::StatusOr<ClusterSpec> parsed = ParseCluster(c.text, "c.pbtxt", TwoByTwo());
    REQUIRE(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()), Catch::StartsWith(c.message));
  }
}

TEST_CASE("a missing cluster file is NOT_FOUND naming it", "[cluster_spec]") {
  absl::StatusOr<ClusterSpec> c = LoadClusterFile("/no/such/cluster.pbtxt", TwoByTwo());
  CHECK(c.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("/no/such/cluster.pbtxt"));
}

}  // namespace
}  // namespace launch
}  // namespace ps
