#include "deploy/launch/cluster_spec.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_config.h"
#include "common/net_address.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace launch {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::TextFormat;

// Keeps the first syntax error: "line:column: message", 1-based, at the offending name.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstError(const std::string& text) : text_(text) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error_.ok()) return;
    int at_line = line;
    int at_column = column;
    PointAtQuotedName(text_, message, &at_line, &at_column);
    error_ = absl::InvalidArgumentError(
        absl::StrFormat("%d:%d: %s", at_line + 1, at_column + 1, message));
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const absl::Status& error() const { return error_; }

 private:
  const std::string& text_;
  absl::Status error_;
};

// Builds `path:line:col: subject: what` for field `name` of a message whose fields `tree`
// locates (the position of `fallback` when the field was not written).
class Errors {
 public:
  Errors(absl::string_view path, const TextFormat::ParseInfoTree* root)
      : path_(path), root_(root) {}

  // An error about field `name` (element `index` of a repeated one) of the top-level message,
  // or of hosts[host] when host >= 0.
  absl::Status At(const char* name, int index, int host, const std::string& subject,
                  const std::string& what) const {
    const Message& prototype = ClusterSpec::default_instance();
    const TextFormat::ParseInfoTree* tree = root_;
    google::protobuf::TextFormat::ParseLocation where(0, 0);
    if (host >= 0) {
      const FieldDescriptor* hosts = prototype.GetDescriptor()->FindFieldByName("hosts");
      where = root_->GetLocation(hosts, host);
      tree = root_->GetTreeForNested(hosts, host);
    }
    if (tree != nullptr && name != nullptr) {
      const google::protobuf::Descriptor* type =
          host >= 0 ? Host::descriptor() : ClusterSpec::descriptor();
      const FieldDescriptor* field = type->FindFieldByName(name);
      const auto found = tree->GetLocation(field, field->is_repeated() ? index : -1);
      if (found.line >= 0) where = found;
    }
    if (where.line < 0) where = google::protobuf::TextFormat::ParseLocation(0, 0);
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: %s: %s", path_, where.line + 1,
                                                      where.column + 1, subject, what));
  }

 private:
  const std::string path_;
  const TextFormat::ParseInfoTree* const root_;
};

// Whether `flags` set the absl flag `name` (--name=V, --name V, -name...).
bool HasFlag(const google::protobuf::RepeatedPtrField<std::string>& flags, absl::string_view name) {
  for (absl::string_view flag : flags) {
    if (!absl::ConsumePrefix(&flag, "--")) absl::ConsumePrefix(&flag, "-");
    if (flag == name || absl::StartsWith(flag, absl::StrCat(name, "="))) return true;
  }
  return false;
}

// The checks of `coordinators` and the etcd fields (the SSH placement is checked with the hosts).
absl::Status CheckCoordinators(const ClusterSpec& cluster, const Errors& errors) {
  const uint32_t n = cluster.coordinators();
  if (n < 1 || n > 3) {
    return errors.At("coordinators", 0, -1, "coordinators",
                     absl::StrCat("must be 1 to 3, got ", n,
                                  " (1: one coordinator with its data_dir; 2 or 3: with etcd)"));
  }
  const bool launched_etcd_fields = cluster.etcd_client_port() != 0 ||
                                    cluster.etcd_peer_port() != 0 ||
                                    cluster.etcd_flags_size() > 0 || cluster.has_etcd_binary();
  if (n == 1) {
    if (cluster.has_etcd_endpoints()) {
      return errors.At("etcd_endpoints", 0, -1, "etcd_endpoints",
                       "is for coordinators: 2 or 3 (one coordinator keeps its state in a "
                       "data_dir; or give it --etcd in coordinator_flags)");
    }
    if (launched_etcd_fields) {
      const char* field = cluster.etcd_client_port() != 0 ? "etcd_client_port"
                          : cluster.etcd_peer_port() != 0 ? "etcd_peer_port"
                          : cluster.etcd_flags_size() > 0 ? "etcd_flags"
                                                          : "etcd_binary";
      return errors.At(field, 0, -1, field,
                       "is for the etcd ps_launch starts with coordinators: 2 or 3");
    }
    return absl::OkStatus();
  }
  if (cluster.backend() == ClusterSpec::SLURM) {
    return errors.At("coordinators", 0, -1, "coordinators",
                     absl::StrCat(n,
                                  ": the SLURM backend runs one coordinator (an srun step on the "
                                  "first node, with no etcd cluster to keep several "
                                  "coordinators' state): use coordinators: 1, or the SSH backend "
                                  "on the allocation's nodes"));
  }
  for (const char* flag : {"etcd", "etcd_prefix", "data_dir"}) {
    if (HasFlag(cluster.coordinator_flags(), flag)) {
      return errors.At("coordinator_flags", 0, -1, "coordinator_flags",
                       absl::StrCat("--", flag,
                                    " with coordinators > 1: ps_launch gives every coordinator "
                                    "--etcd (etcd_endpoints, or the etcd it starts) and "
                                    "--etcd_prefix, and no --data_dir"));
    }
  }
  if (cluster.has_etcd_endpoints()) {
    if (launched_etcd_fields) {
      return errors.At("etcd_endpoints", 0, -1, "etcd_endpoints",
                       "names an existing etcd: etcd_client_port, etcd_peer_port, etcd_flags and "
                       "etcd_binary are for the one ps_launch starts when etcd_endpoints is empty");
    }
    if (cluster.etcd_endpoints().empty()) {
      return errors.At("etcd_endpoints", 0, -1, "etcd_endpoints",
                       "is empty: give host:port,... of an etcd cluster, or leave the field out "
                       "for ps_launch to start one");
    }
    for (absl::string_view endpoint : absl::StrSplit(cluster.etcd_endpoints(), ',')) {
      absl::string_view address = absl::StripAsciiWhitespace(endpoint);
      if (absl::StartsWith(address, "https://")) {
        return errors.At("etcd_endpoints", 0, -1, "etcd_endpoints",
                         absl::StrCat("\"", address, "\": TLS to etcd is not supported"));
      }
      absl::ConsumePrefix(&address, "http://");
      const absl::StatusOr<HostPort> parsed = ParseHostPort(address, AddressUse::kDial);
      if (!parsed.ok()) {
        return errors.At(
            "etcd_endpoints", 0, -1, "etcd_endpoints",
            absl::StrCat("\"", endpoint, "\" is not host:port: ", parsed.status().message()));
      }
    }
    return absl::OkStatus();
  }
  for (const char* field : {"etcd_client_port", "etcd_peer_port"}) {
    const uint32_t port = std::string(field) == "etcd_client_port" ? cluster.etcd_client_port()
                                                                   : cluster.etcd_peer_port();
    if (port > 65535) {
      return errors.At(field, 0, -1, field, absl::StrCat("must be at most 65535, got ", port));
    }
  }
  if (cluster.etcd_client_port() != 0 && cluster.etcd_client_port() == cluster.etcd_peer_port()) {
    return errors.At("etcd_peer_port", 0, -1, "etcd_peer_port",
                     absl::StrCat("is etcd_client_port too (", cluster.etcd_client_port(),
                                  "): each member needs two ports"));
  }
  if (cluster.etcd_binary().empty()) {
    return errors.At("etcd_binary", 0, -1, "etcd_binary", "is empty");
  }
  return absl::OkStatus();
}

absl::Status Check(const ClusterSpec& cluster, const config::Job& job, const Errors& errors) {
  if (cluster.bin_dir().empty()) {
    return errors.At(nullptr, 0, -1, "bin_dir",
                     "is required: the folder with the binaries on every host (e.g. "
                     "bazel-out/k8-opt/bin, or a bundle's bin/)");
  }
  if (cluster.connect_timeout_s() == 0) {
    return errors.At("connect_timeout_s", 0, -1, "connect_timeout_s", "must be > 0");
  }
  if (cluster.coordinator_port() > 65535) {
    return errors.At("coordinator_port", 0, -1, "coordinator_port",
                     absl::StrCat("must be at most 65535, got ", cluster.coordinator_port()));
  }
  const std::string backend = ClusterSpec::Backend_Name(cluster.backend());
  if (cluster.backend() != ClusterSpec::SSH) {
    if (cluster.hosts_size() > 0) {
      return errors.At(
          "hosts", 0, -1, "hosts",
          absl::StrCat("the ", backend, " backend places the daemons itself: hosts are for SSH"));
    }
    if (cluster.has_ssh()) {
      return errors.At("ssh", 0, -1, "ssh", absl::StrCat("is for SSH, not ", backend));
    }
  }
  if (cluster.backend() != ClusterSpec::SLURM && cluster.has_slurm()) {
    return errors.At("slurm", 0, -1, "slurm", absl::StrCat("is for SLURM, not ", backend));
  }
  if (cluster.backend() == ClusterSpec::SLURM && cluster.slurm().nodes() == 0) {
    return errors.At("slurm", 0, -1, "slurm.nodes", "must be >= 1");
  }
  if (absl::Status checked = CheckCoordinators(cluster, errors); !checked.ok()) return checked;
  if (cluster.backend() == ClusterSpec::LOCAL && cluster.coordinator_port() != 0 &&
      cluster.coordinator_port() + cluster.coordinators() - 1 > 65535) {
    return errors.At(
        "coordinator_port", 0, -1, "coordinator_port",
        absl::StrCat("the LOCAL coordinators listen on coordinator_port, +1, +2: ",
                     cluster.coordinator_port(), " leaves no room for ", cluster.coordinators()));
  }
  if (cluster.backend() != ClusterSpec::SSH) return absl::OkStatus();

  if (cluster.hosts_size() == 0) {
    return errors.At("backend", 0, -1, "hosts", "the SSH backend needs at least one host");
  }
  const int wanted = static_cast<int>(cluster.coordinators());
  if (wanted > cluster.hosts_size()) {
    return errors.At("coordinators", 0, -1, "coordinators",
                     absl::StrCat(wanted, " coordinators need ", wanted,
                                  " hosts: each runs on a host of its own (coordinator: true), "
                                  "and the description has ",
                                  cluster.hosts_size()));
  }
  if (cluster.ssh().connect_timeout_s() == 0) {
    return errors.At("ssh", 0, -1, "ssh.connect_timeout_s", "must be > 0");
  }
  std::set<std::string> names;
  int coordinators = 0;
  uint32_t servers = 0;
  uint32_t workers = 0;
  for (int i = 0; i < cluster.hosts_size(); ++i) {
    const Host& host = cluster.hosts(i);
    const std::string subject = absl::StrCat("hosts[", i, "] \"", host.name(), "\"");
    if (host.name().empty()) return errors.At("name", 0, i, subject, "name is required");
    if (!names.insert(host.name()).second) {
      return errors.At("name", 0, i, subject,
                       "is named twice: give each host one entry with all its daemons");
    }
    if (host.coordinator()) ++coordinators;
    if (coordinators > wanted) {
      return errors.At(
          "coordinator", 0, i, subject,
          wanted == 1 ? std::string("a second coordinator: exactly one host runs it (or set "
                                    "coordinators: 2 or 3, to run them with etcd)")
                      : absl::StrCat("coordinator ", coordinators, " of coordinators: ", wanted,
                                     ": that many hosts run one (one a host)"));
    }
    if (!host.coordinator() && host.servers() == 0 && host.workers() == 0) {
      return errors.At("name", 0, i, subject, "runs nothing (no coordinator, servers or workers)");
    }
    servers += host.servers();
    workers += host.workers();
  }
  if (coordinators == 0) {
    return errors.At("hosts", 0, -1, "hosts", "no host runs the coordinator (coordinator: true)");
  }
  if (coordinators < wanted) {
    return errors.At("coordinators", 0, -1, "coordinators",
                     absl::StrCat(wanted, " coordinators, but ", coordinators,
                                  " host(s) have coordinator: true: mark ", wanted,
                                  " hosts (each coordinator runs on a host of its own)"));
  }
  if (servers != job.cluster().num_servers()) {
    return errors.At("hosts", 0, -1, "hosts",
                     absl::StrCat("servers over all hosts add up to ", servers,
                                  ", the job's "
                                  "cluster.num_servers is ",
                                  job.cluster().num_servers()));
  }
  if (workers != job.cluster().num_workers()) {
    return errors.At("hosts", 0, -1, "hosts",
                     absl::StrCat("workers over all hosts add up to ", workers,
                                  ", the job's "
                                  "cluster.num_workers is ",
                                  job.cluster().num_workers()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ParseCluster(absl::string_view text, absl::string_view path,
                                         const config::Job& job) {
  ClusterSpec cluster;
  TextFormat::Parser parser;
  const std::string copy(text);
  FirstError syntax(copy);
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&syntax);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(copy, &cluster)) {
    if (!syntax.error().ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", syntax.error().message()));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ":1:1: cannot parse the cluster"));
  }
  const absl::Status checked = Check(cluster, job, Errors(path, &tree));
  if (!checked.ok()) return checked;
  return cluster;
}

absl::StatusOr<ClusterSpec> LoadClusterFile(const std::string& path, const config::Job& job) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such cluster file"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseCluster(text.str(), path, job);
}

}  // namespace launch
}  // namespace ps
