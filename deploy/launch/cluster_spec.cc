#include "deploy/launch/cluster_spec.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_config.h"
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
  if (cluster.backend() != ClusterSpec::SSH) return absl::OkStatus();

  if (cluster.hosts_size() == 0) {
    return errors.At("backend", 0, -1, "hosts", "the SSH backend needs at least one host");
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
    if (coordinators > 1) {
      return errors.At("coordinator", 0, i, subject,
                       "a second coordinator: exactly one host runs it");
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
