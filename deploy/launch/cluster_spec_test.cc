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
  const std::string three = R"(hosts { name: "a" coordinator: true servers: 1 workers: 1 }
hosts { name: "b" coordinator: true servers: 1 workers: 1 }
hosts { name: "c" coordinator: true }
)";
  const Case cases[] = {
      {"backend: SSH\n" + hosts, "c.pbtxt:1:1: bin_dir: is required"},
      {"bin_dir: \"b\"\ncoordinators: 4\n", "c.pbtxt:2:1: coordinators: must be 1 to 3, got 4"},
      {"bin_dir: \"b\"\ncoordinators: 0\n", "c.pbtxt:2:1: coordinators: must be 1 to 3, got 0"},
      {"bin_dir: \"b\"\nbackend: SSH\ncoordinators: 3\n" + hosts,
       "c.pbtxt:3:1: coordinators: 3 coordinators need 3 hosts: each runs on a host of its own"},
      {"bin_dir: \"b\"\nbackend: SSH\ncoordinators: 2\n" + hosts,
       "c.pbtxt:3:1: coordinators: 2 coordinators, but 1 host(s) have coordinator: true"},
      {"bin_dir: \"b\"\nbackend: SSH\ncoordinators: 2\n" + three,
       "c.pbtxt:6:19: hosts[2] \"c\": coordinator 3 of coordinators: 2"},
      {"bin_dir: \"b\"\nbackend: SLURM\ncoordinators: 3\n",
       "c.pbtxt:3:1: coordinators: 3: the SLURM backend runs one coordinator"},
      {"bin_dir: \"b\"\ncoordinators: 3\netcd_endpoints: \"h1:2379,h2\"\n",
       "c.pbtxt:3:1: etcd_endpoints: \"h2\" is not host:port"},
      {"bin_dir: \"b\"\ncoordinators: 3\netcd_endpoints: \"\"\n",
       "c.pbtxt:3:1: etcd_endpoints: is empty"},
      {"bin_dir: \"b\"\ncoordinators: 3\netcd_endpoints: \"https://h1:2379\"\n",
       "c.pbtxt:3:1: etcd_endpoints: \"https://h1:2379\": TLS to etcd is not supported"},
      {"bin_dir: \"b\"\ncoordinators: 3\netcd_endpoints: \"h1:2379\"\netcd_flags: \"-x\"\n",
       "c.pbtxt:3:1: etcd_endpoints: names an existing etcd"},
      {"bin_dir: \"b\"\netcd_endpoints: \"h1:2379\"\n",
       "c.pbtxt:2:1: etcd_endpoints: is for coordinators: 2 or 3"},
      {"bin_dir: \"b\"\netcd_client_port: 2379\n",
       "c.pbtxt:2:1: etcd_client_port: is for the etcd ps_launch starts"},
      {"bin_dir: \"b\"\ncoordinators: 2\ncoordinator_flags: \"--data_dir=/x\"\n",
       "c.pbtxt:3:1: coordinator_flags: --data_dir with coordinators > 1"},
      {"bin_dir: \"b\"\ncoordinators: 2\netcd_client_port: 70000\n",
       "c.pbtxt:3:1: etcd_client_port: must be at most 65535"},
      {"bin_dir: \"b\"\ncoordinators: 2\netcd_client_port: 5000\netcd_peer_port: 5000\n",
       "c.pbtxt:4:1: etcd_peer_port: is etcd_client_port too"},
      {"bin_dir: \"b\"\ncoordinators: 3\ncoordinator_port: 65534\n",
       "c.pbtxt:3:1: coordinator_port: the LOCAL coordinators listen on"},
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

TEST_CASE("several coordinators load, with or without an etcd of their own", "[cluster_spec]") {
  absl::StatusOr<ClusterSpec> local =
      ParseCluster("bin_dir: \"b\"\ncoordinators: 3\n", "c.pbtxt", TwoByTwo());
  INFO(local.status().ToString());
  REQUIRE(local.ok());
  CHECK(local->coordinators() == 3);
  CHECK(local->etcd_binary() == "etcd");
  absl::StatusOr<ClusterSpec> ssh = ParseCluster(
      R"(bin_dir: "b" backend: SSH coordinators: 2 etcd_endpoints: "e1:2379, http://e2:2379"
         hosts { name: "a" coordinator: true servers: 2 }
         hosts { name: "b" coordinator: true workers: 2 })",
      "c.pbtxt", TwoByTwo());
  INFO(ssh.status().ToString());
  CHECK(ssh.ok());
}

TEST_CASE("a missing cluster file is NOT_FOUND naming it", "[cluster_spec]") {
  absl::StatusOr<ClusterSpec> c = LoadClusterFile("/no/such/cluster.pbtxt", TwoByTwo());
  CHECK(c.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("/no/such/cluster.pbtxt"));
}

}  // namespace
}  // namespace launch
}  // namespace ps
