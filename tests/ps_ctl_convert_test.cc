// `ps_ctl convert` (issue 37): a job's Criteo text data into binary files that read back as the
// samples the text holds, with a summary line per file; usage and data errors exit 2 and 1.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/daemon.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/binary_format.h"

namespace ps {
namespace {

constexpr char kPsCtl[] = "client/ps_ctl";

std::string WriteJob(const std::string& dir, const std::string& train, const std::string& eval) {
  const std::string path = absl::StrCat(dir, "/job.pbtxt");
  std::ofstream(path) << absl::StrFormat(
      "name: \"convert\"\n"
      "tables { name: \"emb\" dim: 16 }\n"
      "model { shared_table: \"emb\" }\n"
      "data { train_paths: \"%s\" eval_paths: \"%s\" }\n"
      "training { batch_size: 64 epochs: 1 }\n",
      train, eval);
  return path;
}

// `lines` lines of Criteo's shape (label, 13 integers, 26 hex values); line `bad` has a bad
// label.
void WriteData(const std::string& path, int lines, int bad = -1) {
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << (i == bad ? 7 : i % 3 == 0 ? 1 : 0);
    for (int d = 0; d < 13; ++d) out << '\t' << (i + d) % 97;
    for (int c = 0; c < 26; ++c) out << '\t' << absl::StrFormat("%08x", (i * 31 + c) % 5000);
    out << '\n';
  }
}

TEST_CASE("ps_ctl convert writes a job's train and eval data as binary files",
          "[integration][ps_ctl]") {
  auto dir = testing::ScopedTempDir::Create("ps_ctl_convert");
  REQUIRE(dir.ok());
  const std::string train = (*dir)->path() + "/train.tsv", eval = (*dir)->path() + "/eval.tsv";
  WriteData(train, 300, 10);
  WriteData(eval, 40);
  const std::string job = WriteJob((*dir)->path(), train, eval);
  const std::string out = (*dir)->path() + "/bin";
  const auto result = testing::RunProcess(
      kPsCtl, {"convert", "--job=" + job, "--out=" + out, "--chunk_samples=100"});
  REQUIRE(result.ok());
  INFO(result->stdout_text << result->stderr_text);
  CHECK(result->exit_code == 0);
  CHECK_THAT(result->stdout_text,
             Catch::StartsWith("converted train: 299 samples, 1 skipped lines, from 1 files ("));
  CHECK_THAT(result->stdout_text,
             Catch::Contains(absl::StrCat("to ", out, "/train.bin (")) &&
                 Catch::Contains("bytes, 3 chunks)\nconverted eval: 40 samples, 0 skipped lines"));
  CHECK(result->stderr_text ==
        absl::StrCat("warning: skipped ", train, ":11: label must be 0 or 1, got 7\n"));

  worker::BinarySchema criteo;
  criteo.num_dense = 13;
  criteo.num_sparse = 26;
  auto reader = worker::BinaryReader::Open({out + "/train.bin"}, criteo,
                                           {worker::BinaryReaderOptions::Verify::kFull});
  REQUIRE(reader.ok());
  CHECK((*reader)->samples() == 299);
  reader = worker::BinaryReader::Open({out + "/eval.bin"}, criteo);
  REQUIRE(reader.ok());
  CHECK((*reader)->samples() == 40);
}

TEST_CASE("ps_ctl convert: a usage error exits 2, a missing data file 1", "[integration][ps_ctl]") {
  auto dir = testing::ScopedTempDir::Create("ps_ctl_convert");
  REQUIRE(dir.ok());
  const std::string job =
      WriteJob((*dir)->path(), (*dir)->path() + "/none.tsv", (*dir)->path() + "/none.tsv");
  auto result = testing::RunProcess(kPsCtl, {"convert", "--job=" + job});
  REQUIRE(result.ok());
  CHECK(result->exit_code == 2);
  CHECK_THAT(result->stderr_text,
             Catch::StartsWith("ps_ctl convert: --job and --out are required"));
  result = testing::RunProcess(
      kPsCtl, {"convert", "--job=" + job, "--out=" + (*dir)->path(), "--chunk_samples=0"});
  REQUIRE(result.ok());
  CHECK(result->exit_code == 2);
  CHECK(result->stderr_text == "ps_ctl convert: --chunk_samples must be in [1, 65536]\n");

  result = testing::RunProcess(kPsCtl, {"convert", "--job=" + job, "--out=" + (*dir)->path()});
  REQUIRE(result.ok());
  CHECK(result->exit_code == 1);
  CHECK_THAT(result->stderr_text,
             Catch::StartsWith("ps_ctl convert: NOT_FOUND: ") && Catch::Contains("none.tsv"));
}

}  // namespace
}  // namespace ps
