#include "worker/data/criteo_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/testing/temp_dir.h"
#include "xxhash.h"

namespace ps {
namespace worker {
namespace {

// A new path under $TEST_TMPDIR (or /tmp) ending in `suffix`.
std::string TempPath(const std::string& suffix) {
  static std::atomic<int> counter{0};
  return absl::StrCat(testing::TempDir(), "/criteo_reader_test.", getpid(), ".",
                      counter.fetch_add(1), suffix);
}

std::string WritePlain(const std::string& text) {
  const std::string path = TempPath(".tsv");
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
  return path;
}

// Writes `members` as concatenated gzip members (one member when there is one string).
std::string WriteGzip(const std::vector<std::string>& members) {
  const std::string path = TempPath(".tsv.gz");
  for (size_t i = 0; i < members.size(); ++i) {
    gzFile file = gzopen(path.c_str(), i == 0 ? "wb" : "ab");
    REQUIRE(file != nullptr);
    if (!members[i].empty()) {
      REQUIRE(gzwrite(file, members[i].data(), members[i].size()) ==
              static_cast<int>(members[i].size()));
    }
    REQUIRE(gzclose(file) == Z_OK);
  }
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One sample as the test expects the reader to return it, computed independently of the reader.
struct Row {
  float label = 0;
  std::vector<float> dense;
  std::vector<uint64_t> keys;
  bool operator==(const Row& o) const {
    return label == o.label && dense == o.dense && keys == o.keys;
  }
};

// Random valid lines with empty fields, negative integers and mixed-case hex, and their rows.
class LineMaker {
 public:
  explicit LineMaker(uint32_t seed, SchemaOptions schema = {}) : rng_(seed), schema_(schema) {}

  std::string Make(Row* row) {
    std::vector<std::string> fields;
    row->label = static_cast<float>(rng_() % 2);
    fields.push_back(row->label == 1 ? "1" : "0");
    row->dense.clear();
    row->keys.clear();
    for (int d = 0; d < schema_.num_dense; ++d) {
      if (rng_() % 5 == 0) {
        fields.push_back("");
        row->dense.push_back(0);
        continue;
      }
      const int64_t x = static_cast<int64_t>(rng_() % 100000) - 3;
      fields.push_back(absl::StrCat(x));
      row->dense.push_back(x > 0 ? static_cast<float>(std::log(1.0 + x)) : 0.0f);
    }
    for (int c = 0; c < schema_.num_sparse; ++c) {
      std::string value;
      if (rng_() % 10 != 0) {
        value = absl::StrFormat(rng_() % 4 == 0 ? "%08X" : "%08x", rng_() % 1000);
      }
      fields.push_back(value);
      row->keys.push_back(XXH3_64bits_withSeed(value.data(), value.size(), c + 1));
    }
    return absl::StrJoin(fields, "\t");
  }

 private:
  std::mt19937 rng_;
  const SchemaOptions schema_;
};

// `count` lines of `maker`, each ending in "\n"; their rows are appended to `rows`.
std::string MakeLines(LineMaker* maker, int count, std::vector<Row>* rows) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    Row row;
    text += maker->Make(&row) + "\n";
    rows->push_back(row);
  }
  return text;
}

// The rows of `batch`, in order.
std::vector<Row> RowsOf(const Batch& batch, const SchemaOptions& schema) {
  std::vector<Row> rows;
  for (int i = 0; i < batch.size; ++i) {
    Row row;
    row.label = batch.labels[i];
    row.dense.assign(batch.dense.begin() + i * schema.num_dense,
                     batch.dense.begin() + (i + 1) * schema.num_dense);
    row.keys.assign(batch.keys.begin() + i * schema.num_sparse,
                    batch.keys.begin() + (i + 1) * schema.num_sparse);
    rows.push_back(row);
  }
  return rows;
}

// Reads every remaining sample of `reader` in batches of `batch_size`, checking batch shapes.
std::vector<Row> ReadAll(CriteoReader* reader, int batch_size) {
  const SchemaOptions schema = reader->schema();
  std::vector<Row> rows;
  Batch batch;
  while (true) {
    absl::StatusOr<int> n = reader->Next(batch_size, &batch);
    REQUIRE(n.ok());
    REQUIRE(*n == batch.size);
    REQUIRE(batch.labels.size() == static_cast<size_t>(*n));
    REQUIRE(batch.dense.size() == static_cast<size_t>(*n) * schema.num_dense);
    REQUIRE(batch.keys.size() == static_cast<size_t>(*n) * schema.num_sparse);
    if (*n == 0) return rows;
    for (const Row& row : RowsOf(batch, schema)) rows.push_back(row);
  }
}

std::unique_ptr<CriteoReader> MustOpen(std::vector<std::string> paths, int rank = 0,
                                       int world_size = 1, SchemaOptions schema = {}) {
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
      CriteoReader::Open(std::move(paths), rank, world_size, schema);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  return std::move(*reader);
}

// A valid 40-field line whose first categorical value is `value`.
std::string LineWithValue(const std::string& value) {
  return absl::StrCat("1", std::string(13, '\t'), "\t", value, std::string(25, '\t'));
}

TEST_CASE("keys and the integer transform are pinned", "[worker][criteo]") {
  // Changing these changes every trained model's keys.
  CHECK(CriteoKey(0, "") == 0x4dc5b0cc826f6703ull);
  CHECK(CriteoKey(25, "") == 0x4feb3b41e552781full);
  CHECK(CriteoKey(0, "68fd1e64") == 0x5705b9eaec3433a1ull);
  CHECK(CriteoKey(1, "68fd1e64") == 0xc36f1aec65472de8ull);
  CHECK(CriteoKey(5, "80e26c9b") == 0x98b155a69d1c6689ull);

  const SchemaOptions schema{6, 2};
  float label = -1;
  float dense[6];
  uint64_t keys[2];
  REQUIRE(ParseCriteoLine("1\t\t0\t-7\t1\t9\t123456789012\t\t68fd1e64", schema, &label, dense, keys)
              .ok());
  CHECK(label == 1.0f);
  CHECK(dense[0] == 0.0f);  // empty
  CHECK(dense[1] == 0.0f);  // 0
  CHECK(dense[2] == 0.0f);  // negative
  CHECK(dense[3] == static_cast<float>(std::log(2.0)));
  CHECK(dense[4] == static_cast<float>(std::log(10.0)));
  CHECK(dense[5] == static_cast<float>(std::log1p(123456789012.0)));
  CHECK(keys[0] == CriteoKey(0, ""));
  CHECK(keys[1] == CriteoKey(1, "68fd1e64"));
  // Empty values give each field its own "missing" key.
  CHECK(CriteoKey(0, "") != CriteoKey(1, ""));
}

TEST_CASE("plain and gzip files give the same batches", "[worker][criteo]") {
  const int batch_size = GENERATE(1, 7, 64, 1000);
  LineMaker maker(42);
  std::vector<Row> expected;
  std::string text = MakeLines(&maker, 500, &expected);
  const std::string plain = WritePlain(text);
  const std::string gzip = WriteGzip({text});
  REQUIRE(ReadBytes(gzip).substr(0, 2) == "\x1f\x8b");

  std::unique_ptr<CriteoReader> plain_reader = MustOpen({plain});
  std::unique_ptr<CriteoReader> gzip_reader = MustOpen({gzip});
  const std::vector<Row> from_plain = ReadAll(plain_reader.get(), batch_size);
  const std::vector<Row> from_gzip = ReadAll(gzip_reader.get(), batch_size);
  CHECK(from_plain == expected);
  CHECK(from_gzip == expected);
  CHECK(plain_reader->skipped_lines() == 0);
  CHECK(gzip_reader->skipped_lines() == 0);

  // Every further call says the data has ended.
  Batch batch;
  batch.size = 3;
  absl::StatusOr<int> n = gzip_reader->Next(batch_size, &batch);
  REQUIRE(n.ok());
  CHECK(*n == 0);
  CHECK(batch.size == 0);
  CHECK(batch.labels.empty());
}

TEST_CASE("concatenated gzip members, empty files and missing final newlines", "[worker][criteo]") {
  LineMaker maker(7);
  std::vector<Row> expected;
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) {
    Row row;
    lines.push_back(maker.Make(&row));
    expected.push_back(row);
  }
  const std::string members = WriteGzip(
      {lines[0] + "\n" + lines[1] + "\n", "", lines[2] + "\n", lines[3]});  // no final newline
  const std::string empty_plain = WritePlain("");
  const std::string empty_gzip = WriteGzip({""});
  const std::string tail = WritePlain(absl::StrJoin(lines.begin() + 4, lines.end(), "\n"));
  std::unique_ptr<CriteoReader> reader =
      MustOpen({empty_plain, members, empty_gzip, empty_plain, tail});
  CHECK(ReadAll(reader.get(), 5) == expected);
  CHECK(reader->skipped_lines() == 0);
}

TEST_CASE("rank striping covers every line exactly once", "[worker][criteo]") {
  const int world_size = GENERATE(1, 2, 3);
  // Three files, some lines malformed; a line's first categorical value is its global index.
  const int kFiles = 3;
  const int kLinesPerFile = 50;
  std::vector<std::string> paths;
  std::map<uint64_t, int> index_of_key;
  std::vector<bool> malformed;
  for (int f = 0; f < kFiles; ++f) {
    std::string text;
    for (int i = 0; i < kLinesPerFile; ++i) {
      const int index = f * kLinesPerFile + i;
      const std::string value = absl::StrFormat("%08x", index);
      const bool bad = index % 7 == 3;
      text += bad ? "junk\n" : LineWithValue(value) + "\n";
      malformed.push_back(bad);
      index_of_key[CriteoKey(0, value)] = index;
    }
    paths.push_back(f == 1 ? WriteGzip({text}) : WritePlain(text));
  }

  std::vector<int> seen(kFiles * kLinesPerFile, 0);
  int64_t skipped = 0;
  for (int rank = 0; rank < world_size; ++rank) {
    std::unique_ptr<CriteoReader> reader = MustOpen(paths, rank, world_size);
    for (const Row& row : ReadAll(reader.get(), 16)) {
      const int index = index_of_key.at(row.keys[0]);
      CHECK(index % world_size == rank);
      ++seen[index];
    }
    skipped += reader->skipped_lines();
    for (const std::string& report : reader->skip_reports()) {
      // "path:line: ..." with the line of this rank.
      const size_t colon = report.find(':');
      const int file = static_cast<int>(
          std::find(paths.begin(), paths.end(), report.substr(0, colon)) - paths.begin());
      REQUIRE(file < kFiles);
      const int line = std::atoi(report.c_str() + colon + 1);
      CHECK((file * kLinesPerFile + line - 1) % world_size == rank);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    INFO("line " << i);
    CHECK(seen[i] == (malformed[i] ? 0 : 1));
  }
  CHECK(skipped == std::count(malformed.begin(), malformed.end(), true));
}

TEST_CASE("malformed lines are skipped and reported with path:line", "[worker][criteo]") {
  const bool gzip = GENERATE(false, true);
  LineMaker maker(3);
  Row good;
  const std::string good_line = maker.Make(&good);
  const std::string fields39 = std::string("0") + std::string(38, '\t');
  const std::string fields41 = std::string("0") + std::string(40, '\t');
  const std::vector<std::string> lines = {
      good_line,                                                           // 1
      fields39,                                                            // 2
      fields41,                                                            // 3
      std::string("2") + std::string(39, '\t'),                            // 4
      std::string(39, '\t'),                                               // 5
      "1\t5\tx1" + std::string(37, '\t'),                                  // 6
      "1\t" + std::string(15, '\t') + "zz" + std::string(23, '\t'),        // 7
      "",                                                                  // 8
      good_line + "\r",                                                    // 9: CRLF
      "\r",                                                                // 10
      "0\t99999999999999999999" + std::string(38, '\t'),                   // 11
      "0\t1.5" + std::string(38, '\t'),                                    // 12
      "0\t+3" + std::string(38, '\t'),                                     // 13
      "0\t-" + std::string(38, '\t'),                                      // 14
      "0" + std::string(13, '\t') + "\t68fd1e6g" + std::string(25, '\t'),  // 15
      "0" + std::string(39, '\t') + "0x12",                                // 16
      "1.0" + std::string(39, '\t'),                                       // 17
      "1 " + std::string(39, '\t'),                                        // 18
      "0\t" + std::string(40, 'q') + std::string(38, '\t'),                // 19
      good_line,                                                           // 20
  };
  const std::string text = absl::StrJoin(lines, "\n") + "\n";
  const std::string path = gzip ? WriteGzip({text}) : WritePlain(text);
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  const std::vector<Row> rows = ReadAll(reader.get(), 4);
  CHECK(rows == std::vector<Row>{good, good, good});
  const std::vector<std::string> expected = {
      absl::StrCat(path, ":2: expected 40 fields, got 39"),
      absl::StrCat(path, ":3: expected 40 fields, got 41"),
      absl::StrCat(path, ":4: label must be 0 or 1, got 2"),
      absl::StrCat(path, ":5: label must be 0 or 1, got \"\""),
      absl::StrCat(path, ":6: bad integer \"x1\" in field 3 (I2)"),
      absl::StrCat(path, ":7: bad hex \"zz\" in field 17 (C3)"),
      absl::StrCat(path, ":8: empty line"),
      absl::StrCat(path, ":10: empty line"),
      absl::StrCat(path, ":11: bad integer \"99999999999999999999\" in field 2 (I1)"),
      absl::StrCat(path, ":12: bad integer \"1.5\" in field 2 (I1)"),
      absl::StrCat(path, ":13: bad integer \"+3\" in field 2 (I1)"),
      absl::StrCat(path, ":14: bad integer \"-\" in field 2 (I1)"),
      absl::StrCat(path, ":15: bad hex \"68fd1e6g\" in field 15 (C1)"),
      absl::StrCat(path, ":16: bad hex \"0x12\" in field 40 (C26)"),
      absl::StrCat(path, ":17: label must be 0 or 1, got 1.0"),
      absl::StrCat(path, ":18: label must be 0 or 1, got 1 "),
      absl::StrCat(path, ":19: bad integer \"", std::string(32, 'q'), "...\" in field 2 (I1)"),
  };
  CHECK(reader->skip_reports() == expected);
  CHECK(reader->skipped_lines() == static_cast<int64_t>(expected.size()));
}

TEST_CASE("only the first 20 malformed lines are reported, all are counted", "[worker][criteo]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += i % 4 == 0 ? LineWithValue("ab") + "\n" : "bad\n";
  const std::string path = WritePlain(text);
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  CHECK(ReadAll(reader.get(), 8).size() == 25);
  CHECK(reader->skipped_lines() == 75);
  const std::vector<std::string> reports = reader->skip_reports();
  REQUIRE(reports.size() == static_cast<size_t>(CriteoReader::kMaxSkipReports));
  CHECK(reports.front() == absl::StrCat(path, ":2: expected 40 fields, got 1"));
  CHECK(reports.back() == absl::StrCat(path, ":27: expected 40 fields, got 1"));
}

TEST_CASE("long lines are read, too long ones skipped", "[worker][criteo]") {
  const bool gzip = GENERATE(false, true);
  // A valid line of about 64 KiB (one long hex value), a line over the limit, then a short one.
  const std::string long_value(64 << 10, 'a');
  const std::string too_long(CriteoReader::kMaxLineBytes + 10, 'b');
  const std::string text = absl::StrCat(LineWithValue(long_value), "\n", LineWithValue(too_long),
                                        "\n", LineWithValue("c"), "\n", too_long);
  const std::string path = gzip ? WriteGzip({text}) : WritePlain(text);
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  const std::vector<Row> rows = ReadAll(reader.get(), 2);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].keys[0] == CriteoKey(0, long_value));
  CHECK(rows[1].keys[0] == CriteoKey(0, "c"));
  CHECK(reader->skip_reports() ==
        std::vector<std::string>{absl::StrCat(path, ":2: line longer than 1048576 bytes"),
                                 absl::StrCat(path, ":4: line longer than 1048576 bytes")});
}

TEST_CASE("other schemas", "[worker][criteo]") {
  const SchemaOptions schema =
      GENERATE(SchemaOptions{2, 3}, SchemaOptions{0, 4}, SchemaOptions{5, 0}, SchemaOptions{0, 0});
  LineMaker maker(11, schema);
  std::vector<Row> expected;
  std::string text = MakeLines(&maker, 30, &expected);
  text += LineWithValue("ab") + "\n";  // 40 fields: wrong here
  std::unique_ptr<CriteoReader> reader = MustOpen({WritePlain(text)}, 0, 1, schema);
  CHECK(ReadAll(reader.get(), 4) == expected);
  REQUIRE(reader->skip_reports().size() == 1);
  CHECK(absl::EndsWith(
      reader->skip_reports()[0],
      absl::StrCat(":31: expected ", 1 + schema.num_dense + schema.num_sparse, " fields, got 40")));
}

TEST_CASE("Rewind starts the next epoch", "[worker][criteo]") {
  LineMaker maker(5);
  std::string text;
  for (int i = 0; i < 40; ++i) {
    Row row;
    text += (i % 9 == 0 ? "oops" : maker.Make(&row)) + "\n";
  }
  std::unique_ptr<CriteoReader> reader = MustOpen({WritePlain(text), WriteGzip({text})}, 1, 2);
  const std::vector<Row> first = ReadAll(reader.get(), 3);
  const int64_t skipped = reader->skipped_lines();
  const std::vector<std::string> reports = reader->skip_reports();
  CHECK(skipped > 0);
  REQUIRE(reader->Rewind().ok());
  CHECK(reader->skipped_lines() == 0);
  CHECK(reader->skip_reports().empty());
  // Rewind in the middle of an epoch too.
  Batch batch;
  REQUIRE(reader->Next(5, &batch).ok());
  REQUIRE(reader->Rewind().ok());
  CHECK(ReadAll(reader.get(), 11) == first);
  CHECK(reader->skipped_lines() == skipped);
  CHECK(reader->skip_reports() == reports);
}

TEST_CASE("blocks split among readers cover every line exactly once", "[worker][criteo]") {
  // 3 readers of the same file take ranges of every block of 10 lines whose sizes change from
  // block to block, as balanced batches do; 47 lines leave a partial last block.
  LineMaker maker(11);
  std::vector<Row> expected;
  std::string text = MakeLines(&maker, 47, &expected);
  const std::string path = WriteGzip({text});
  std::vector<std::unique_ptr<CriteoReader>> readers;
  for (int r = 0; r < 3; ++r) readers.push_back(MustOpen({path}));
  const std::vector<std::vector<int64_t>> shares = {{3, 3, 4}, {5, 4, 1}, {0, 10, 0}, {1, 1, 8},
                                                    {2, 7, 1}};
  std::vector<Row> got;
  Batch batch;
  for (size_t block = 0; block < shares.size(); ++block) {
    int64_t begin = 0;
    for (int r = 0; r < 3; ++r) {
      absl::StatusOr<int64_t> lines =
          readers[r]->NextBlock(10, begin, shares[block][r], &batch);
      REQUIRE(lines.ok());
      CHECK(*lines == (block < 4 ? 10 : 7));
      // The range is cut by the end of the data.
      CHECK(batch.size ==
            std::max<int64_t>(0, std::min<int64_t>(begin + shares[block][r], *lines) - begin));
      for (const Row& row : RowsOf(batch, readers[r]->schema())) got.push_back(row);
      begin += shares[block][r];
    }
  }
  CHECK(got == expected);
  for (auto& reader : readers) {
    absl::StatusOr<int64_t> lines = reader->NextBlock(10, 0, 10, &batch);
    REQUIRE(lines.ok());
    CHECK(*lines == 0);
    CHECK(batch.size == 0);
  }
  // A new epoch starts at the first block again.
  REQUIRE(readers[0]->Rewind().ok());
  REQUIRE(readers[0]->NextBlock(10, 2, 3, &batch).ok());
  CHECK(RowsOf(batch, readers[0]->schema()) ==
        std::vector<Row>(expected.begin() + 2, expected.begin() + 5));
}

TEST_CASE("a block reports only the malformed lines of its own range", "[worker][criteo]") {
  const std::string good = LineWithValue("a1");
  // Lines 2 and 6 (from 1) are malformed; with blocks of 4, line 2 is at index 1 of block 0 and
  // line 6 at index 1 of block 1.
  const std::string path = WritePlain(absl::StrCat(good, "\n", "x\n", good, "\n", good, "\n",
                                                   good, "\n", "y\n", good, "\n", good, "\n"));
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  Batch batch;
  absl::StatusOr<int64_t> lines = reader->NextBlock(4, 0, 2, &batch);  // lines 1-2
  REQUIRE(lines.ok());
  CHECK(*lines == 4);
  CHECK(batch.size == 1);
  lines = reader->NextBlock(4, 2, 2, &batch);  // lines 7-8
  REQUIRE(lines.ok());
  CHECK(batch.size == 2);
  CHECK(reader->skipped_lines() == 1);
  REQUIRE(reader->skip_reports().size() == 1);
  CHECK(reader->skip_reports()[0] == absl::StrCat(path, ":2: expected 40 fields, got 1"));
}

TEST_CASE("NextBlock refuses bad ranges and reads nothing", "[worker][criteo]") {
  const std::string path = WritePlain(LineWithValue("a1") + "\n");
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  Batch batch;
  CHECK(reader->NextBlock(0, 0, 0, &batch).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(reader->NextBlock(4, -1, 1, &batch).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reader->NextBlock(4, 3, 2, &batch).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(reader->NextBlock(4, 0, -1, &batch).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reader->NextBlock(4, 0, 1, nullptr).status().code() ==
        absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> lines = reader->NextBlock(4, 0, 4, &batch);
  REQUIRE(lines.ok());
  CHECK(*lines == 1);
  CHECK(batch.size == 1);
}

TEST_CASE("Open refuses bad arguments and missing files", "[worker][criteo]") {
  const std::string good = WritePlain(LineWithValue("a") + "\n");
  const std::string missing = TempPath(".missing");
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open({good, missing}, 0, 1);
  REQUIRE(reader.status().code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(reader.status().message(), missing));

  CHECK(CriteoReader::Open({}, 0, 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CriteoReader::Open({good}, 0, 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CriteoReader::Open({good}, 2, 2).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CriteoReader::Open({good}, -1, 2).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CriteoReader::Open({good}, 0, 1, SchemaOptions{-1, 26}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const std::string directory = testing::TempDir();
  reader = CriteoReader::Open({directory}, 0, 1);
  CHECK(reader.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(reader.status().message(), directory));
}

TEST_CASE("Next refuses bad arguments", "[worker][criteo]") {
  std::unique_ptr<CriteoReader> reader = MustOpen({WritePlain(LineWithValue("a") + "\n")});
  Batch batch;
  CHECK(reader->Next(0, &batch).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(reader->Next(-3, &batch).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(reader->Next(CriteoReader::kMaxBatchSamples + 1, &batch).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reader->Next(4, nullptr).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReadAll(reader.get(), 4).size() == 1);  // nothing was consumed
}

TEST_CASE("a truncated gzip file gives DATA_LOSS after its complete rows", "[worker][criteo]") {
  LineMaker maker(9);
  std::vector<Row> expected;
  std::string text = MakeLines(&maker, 2000, &expected);
  const std::string whole = ReadBytes(WriteGzip({text}));
  const std::string path = TempPath(".tsv.gz");
  {
    std::ofstream out(path, std::ios::binary);
    out << whole.substr(0, whole.size() / 2);
  }
  std::unique_ptr<CriteoReader> reader = MustOpen({path, WritePlain(text)});
  std::vector<Row> rows;
  Batch batch;
  absl::Status error;
  while (true) {
    absl::StatusOr<int> n = reader->Next(64, &batch);
    if (!n.ok()) {
      error = n.status();
      break;
    }
    REQUIRE(*n > 0);  // the error comes before the end
    for (int i = 0; i < *n; ++i) {
      rows.push_back(Row{
          batch.labels[i],
          std::vector<float>(batch.dense.begin() + i * 13, batch.dense.begin() + (i + 1) * 13),
          std::vector<uint64_t>(batch.keys.begin() + i * 26, batch.keys.begin() + (i + 1) * 26)});
    }
  }
  CHECK(error.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StartsWith(error.message(), absl::StrCat(path, ":", rows.size() + 1, ": ")));
  CHECK(absl::StrContains(error.message(), "truncated"));
  // Every row returned is a complete one, in order; the cut line is not returned.
  REQUIRE(rows.size() < expected.size());
  CHECK(rows.size() > 100);
  CHECK(std::equal(rows.begin(), rows.end(), expected.begin()));
  CHECK(reader->skipped_lines() == 0);
  // The error stays until Rewind.
  CHECK(reader->Next(64, &batch).status() == error);
  REQUIRE(reader->Rewind().ok());
  REQUIRE(reader->Next(64, &batch).ok());
  CHECK(batch.size == 64);
}

TEST_CASE("a corrupt gzip file gives DATA_LOSS, never a crash", "[worker][criteo]") {
  LineMaker maker(10);
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    Row row;
    text += maker.Make(&row) + "\n";
  }
  std::string bytes = ReadBytes(WriteGzip({text}));
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  const std::string path = TempPath(".tsv.gz");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  std::unique_ptr<CriteoReader> reader = MustOpen({path});
  Batch batch;
  absl::Status error;
  for (int calls = 0; calls < 10000 && error.ok(); ++calls) {
    absl::StatusOr<int> n = reader->Next(64, &batch);
    error = n.status();
    REQUIRE((!n.ok() || *n > 0));
  }
  CHECK(error.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StartsWith(error.message(), path + ":"));
}

TEST_CASE("random bytes give reports or errors, never a crash", "[worker][criteo]") {
  const uint32_t seed = GENERATE(range(1u, 31u));
  std::mt19937 rng(seed);
  // Mostly field-like bytes, with tabs, newlines, CRs and anything else; every third file starts
  // like gzip.
  std::string bytes = seed % 3 == 0 ? "\x1f\x8b" : "";
  const int size = static_cast<int>(rng() % 20000);
  for (int i = 0; i < size; ++i) {
    const uint32_t r = rng() % 100;
    bytes.push_back(r < 10   ? '\t'
                    : r < 13 ? '\n'
                    : r < 14 ? '\r'
                    : r < 60 ? "0123456789abcdef-"[rng() % 17]
                             : static_cast<char>(rng()));
  }
  const std::string path = TempPath(".bin");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  std::unique_ptr<CriteoReader> reader = MustOpen({path}, 0, 1);
  Batch batch;
  int64_t rows = 0;
  for (int calls = 0; calls < 100000; ++calls) {
    absl::StatusOr<int> n = reader->Next(3, &batch);
    if (!n.ok()) {
      CHECK(absl::StartsWith(n.status().message(), path + ":"));
      break;
    }
    if (*n == 0) break;
    rows += *n;
    for (float label : batch.labels) REQUIRE((label == 0 || label == 1));
    for (float x : batch.dense) REQUIRE((std::isfinite(x) && x >= 0));
  }
  CHECK(rows + reader->skipped_lines() <= std::count(bytes.begin(), bytes.end(), '\n') + 1);
  for (const std::string& report : reader->skip_reports()) {
    CHECK(absl::StartsWith(report, path + ":"));
  }
}

TEST_CASE("a glob reads the files it matches in order, one that matches none is NOT_FOUND",
          "[worker][criteo]") {
  auto dir = testing::ScopedTempDir::Create("criteo_glob");
  REQUIRE(dir.ok());
  const std::string d = (*dir)->path();
  LineMaker maker(31);
  std::vector<Row> rows;
  for (const char* name : {"part-1.tsv", "part-2.tsv"}) {
    std::ofstream(absl::StrCat(d, "/", name), std::ios::binary) << MakeLines(&maker, 7, &rows);
  }
  const std::unique_ptr<CriteoReader> reader = MustOpen({d + "/part-*.tsv"});
  CHECK(ReadAll(reader.get(), 4) == rows);

  const absl::Status none = CriteoReader::Open({d + "/trian-*.tsv"}, 0, 1).status();
  CHECK(none.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(none.message(), "trian-*.tsv\" matches no file"));
}

}  // namespace
}  // namespace worker
}  // namespace ps

namespace ps {
namespace worker {
namespace {

// A comma-delimited log with a header: click, price (LOG1P), age (STANDARDIZE 30 +- 10), user
// (single-valued) and tags (multi-valued, "|", at most 3 values) in another order.
SchemaOptions LogSchema(bool skip_overflow) {
  auto text = std::make_shared<TextSchema>();
  text->delimiter = ',';
  text->header = true;
  text->label.name = "click";
  DenseColumnSpec price;
  price.name = "price";
  price.column.name = "price";
  price.transform = DenseColumnSpec::Transform::kLog1p;
  DenseColumnSpec age;
  age.name = "age";
  age.column.index = 4;  // by number: the fifth column
  age.transform = DenseColumnSpec::Transform::kStandardize;
  age.mean = 30;
  age.stddev = 10;
  text->dense = {price, age};
  SparseFieldSpec user;
  user.name = "user";
  user.column.name = "user";
  SparseFieldSpec tags;
  tags.name = "tags";
  tags.column.name = "tags";
  tags.separator = '|';
  tags.max_values = 3;
  tags.skip_overflow = skip_overflow;
  text->sparse = {user, tags};
  SchemaOptions schema;
  schema.num_dense = 2;
  schema.num_sparse = 2;
  schema.text = std::move(text);
  return schema;
}

constexpr char kLog[] =
    "tags,user,click,price,age\n"
    "a|b,u1,1,3,40\n"
    ",u2,0,,20\r\n"
    "c||d|e|f,u1,1,0.5,30\n"
    "x,u3,2,1,1\n"    // label 2: malformed
    "y,u4,0,abc,1\n"  // a bad number
    "z,u5,0,1\n"      // a column short
    "q,u6,1,1e1,25";  // the last line, without its newline

TEST_CASE("delimited text with a header pools multi-valued fields as its schema says",
          "[worker][criteo_reader][schema]") {
  const bool skip = GENERATE(false, true);
  CAPTURE(skip);
  const std::string path = GENERATE(as<bool>{}, false, true) ? WriteGzip({kLog}) : WritePlain(kLog);
  auto reader = CriteoReader::Open({path}, 0, 1, LogSchema(skip));
  REQUIRE(reader.ok());
  Batch batch;
  absl::StatusOr<int> n = (*reader)->Next(100, &batch);
  REQUIRE(n.ok());
  // Line 4 has 5 tag values: truncated to 3, or skipped.
  REQUIRE(*n == (skip ? 3 : 4));
  CHECK(batch.labels == (skip ? std::vector<float>{1, 0, 1} : std::vector<float>{1, 0, 1, 1}));
  const std::vector<float> dense0 = {static_cast<float>(std::log1p(3.0)), 1.0f};
  CHECK(batch.dense[0] == Approx(dense0[0]));
  CHECK(batch.dense[1] == Approx(dense0[1]));
  CHECK(batch.dense[2] == 0.0f);  // empty price
  CHECK(batch.dense[3] == Approx(-1.0f));
  const auto key = [](int f, const char* v) { return CriteoKey(f, v); };
  std::vector<uint64_t> keys = {key(0, "u1"), key(1, "a"), key(1, "b"),  // sample 0
                                key(0, "u2")};                           // sample 1: no tags
  std::vector<uint32_t> offsets = {0, 1, 3, 4, 4};
  if (!skip) {
    keys.insert(keys.end(), {key(0, "u1"), key(1, "c"), key(1, "d"), key(1, "e")});
    offsets.insert(offsets.end(), {5, 8});
  }
  keys.insert(keys.end(), {key(0, "u6"), key(1, "q")});
  offsets.insert(offsets.end(),
                 {static_cast<uint32_t>(keys.size() - 1), static_cast<uint32_t>(keys.size())});
  CHECK(batch.keys == keys);
  CHECK(batch.offsets == offsets);
  CHECK_FALSE(batch.SingleValued());
  CHECK(batch.dense.back() == Approx(-0.5f));  // age 25
  const std::vector<std::string> reports = (*reader)->skip_reports();
  REQUIRE(reports.size() == (skip ? 4u : 3u));
  size_t i = 0;
  if (skip) CHECK(reports[i++] == path + ":4: column 1 (tags) has more than 3 values");
  CHECK(reports[i++] == path + ":5: label must be 0 or 1, got \"2\" in column 3");
  CHECK(reports[i++] == path + ":6: bad number \"abc\" in column 4 (price)");
  CHECK(reports[i++] == path + ":7: expected 5 columns, got 4");
}

TEST_CASE("a header that disagrees with the schema is refused with its file, line and column",
          "[worker][criteo_reader][schema]") {
  const std::string missing = WritePlain("tags,user,click,cost,age\n1,u,1,2,3\n");
  absl::StatusOr<std::unique_ptr<CriteoReader>> r =
      CriteoReader::Open({missing}, 0, 1, LogSchema(false));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(r.status().message() ==
        missing + ":1:1: the header has no column \"price\" (dense column price)");
  const std::string narrow = WritePlain("tags,user,click,price\n");
  r = CriteoReader::Open({narrow}, 0, 1, LogSchema(false));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        narrow + ":1:22: the header has 4 columns; the schema reads column 5 (dense column age)");
  const std::string twice = WritePlain("tags,user,click,price,age,user\n");
  r = CriteoReader::Open({twice}, 0, 1, LogSchema(false));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == twice +
                                    ":1:27: the header names column \"user\" twice (columns 2 "
                                    "and 6) (sparse field user)");

  // A later file's header is checked when the reader reaches it, after the first file's rows.
  const std::string good = WritePlain("tags,user,click,price,age\na,u,1,2,3\n");
  r = CriteoReader::Open({good, missing}, 0, 1, LogSchema(false));
  REQUIRE(r.ok());
  Batch batch;
  absl::StatusOr<int> n = (*r)->Next(10, &batch);
  REQUIRE(n.ok());
  CHECK(*n == 1);
  n = (*r)->Next(10, &batch);
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(n.status().message(), missing + ":1:1: the header has no column"));
}

TEST_CASE("ranks stripe delimited lines without counting headers",
          "[worker][criteo_reader][schema]") {
  std::string a = "tags,user,click,price,age\n", b = a;
  for (int i = 0; i < 5; ++i) absl::StrAppend(&a, "t", i, ",u", i, ",1,1,1\n");
  for (int i = 5; i < 8; ++i) absl::StrAppend(&b, "t", i, ",u", i, ",0,1,1\n");
  const std::vector<std::string> paths = {WritePlain(a), WriteGzip({b})};
  std::vector<uint64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    auto reader = CriteoReader::Open(paths, rank, 3, LogSchema(false));
    REQUIRE(reader.ok());
    Batch batch;
    REQUIRE((*reader)->Next(100, &batch).ok());
    for (int r = 0; r < batch.size; ++r) {
      const uint64_t user = batch.keys[batch.offsets[r * 2]];
      for (int i = 0; i < 8; ++i) {
        if (user == CriteoKey(0, absl::StrCat("u", i))) {
          CHECK(i % 3 == rank);
          seen.push_back(i);
        }
      }
    }
  }
  CHECK(seen.size() == 8);
}

}  // namespace
}  // namespace worker
}  // namespace ps
