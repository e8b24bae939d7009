// The matrix shapes PowerSGD needs on the command line: `--shape` of `gradcomp allreduce-perf` and
// `gradcomp model` (parseShape), and the model's bytes for them (2 (W-1)/W x 4 x (rows + cols) x r per
// compressed matrix, the others as exact fp32 rings, each ring paying its latency).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"
#include "experiments/allreduce_perf_command.h"
#include "experiments/model_command.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream s(line);
  for (std::string cell; std::getline(s, cell, ',');) cells.push_back(cell);
  return cells;
}

// The data lines of a CSV table (the header dropped).
std::vector<std::vector<std::string>> csvRows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream s(text);
  std::string line;
  std::getline(s, line);
  while (std::getline(s, line))
    if (!line.empty()) rows.push_back(splitCsv(line));
  return rows;
}

TEST(ShapeOption, ParsesRowsByColumnsAndNamesWhatItRefuses) {
  EXPECT_EQ(parseShape("1024x512"), std::make_pair(uint64_t{1024}, uint64_t{512}));
  EXPECT_EQ(parseShape("1x1"), std::make_pair(uint64_t{1}, uint64_t{1}));
  EXPECT_EQ(parseShape("32768x65536"), std::make_pair(uint64_t{32768}, uint64_t{65536}));  // 2^31 elements
  for (const std::string bad : {"", "x", "64", "64x", "x64", "0x5", "5x0", "-1x3", "3x-1", "4x4x4", "4X4", "4 x4",
                                "2147483648x1", "65536x65536", "99999999999x1", "1.5x2"}) {
    try {
      parseShape(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--shape '" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

// gradcomp model --shape 1024x512 --shape 64x64 --shape 4x4 --lowrank rank=2 -a powersgd -c none, 4 nodes
// of 1 rank at 1 GB/s and 10 us: P and Q of the two matrices that shrink ((1024 + 512) x 2 + (64 + 64)
// x 2 = 3328 values), and the 4 x 4 (which (4 + 4) x 2 x 2 = 32 >= 16 leaves exact) as fp32.
TEST(ShapeOption, TheModelChargesPowerSgdItsFactorsPerMatrix) {
  ModelOptions o;
  o.nodes = 4;
  o.ranksPerNode = 1;
  o.links = "inter=1GB/10us";
  o.shapes = {"1024x512", "64x64", "4x4"};
  o.lowRank = "rank=2";
  o.codecs = {"none"};
  o.algorithms = {"powersgd"};
  o.encodeGBps = o.decodeGBps = 1;  // given, not measured (codec none does no codec work anyway)
  o.csv = true;
  std::ostringstream out;
  runModelCommand(o, out);
  const auto rows = csvRows(out.str());
  ASSERT_EQ(rows.size(), 1u) << out.str();
  const auto& r = rows[0];  // codec,algorithm,ranks,bytes,wire_ms,...
  EXPECT_EQ(r[1], "powersgd");
  EXPECT_EQ(r[3], std::to_string((1024 * 512 + 64 * 64 + 16) * 4));
  const double w = 4, factorBytes = 2 * (w - 1) / w * 4 * 3328, exactBytes = 2 * (w - 1) / w * 4 * 16;
  const double latency = 3 * 2 * (w - 1) * 10e-6;  // the rings of P, Q and the exact tensor
  EXPECT_NEAR(std::stod(r[4]), (latency + (factorBytes + exactBytes) / 1e9) * 1e3, 1e-6);
  EXPECT_EQ(std::stod(r[5]), 0.0);  // codec none: no codec time

  // Rank 1 compresses the 4 x 4 as well? (4 + 4) x 1 x 2 = 16 is not below 16: still exact.
  o.lowRank = "rank=1";
  std::ostringstream rank1;
  runModelCommand(o, rank1);
  const double factors1 = (1024 + 512) + (64 + 64);
  EXPECT_NEAR(std::stod(csvRows(rank1.str())[0][4]),
              (latency + 2 * (w - 1) / w * 4 * (factors1 + 16) / 1e9) * 1e3, 1e-6);

  o.shapes = {"1024x0"};
  EXPECT_THROW(runModelCommand(o, out), InvalidArgument);
}

// gradcomp allreduce-perf --shape 64x32 --lowrank rank=2 --case powersgd/none: one message of the
// shape's bytes, summed as that matrix (P: 64 x 2, Q: 32 x 2 values over the ring).
// allreduce-perf on `ranks` in-process ranks: rank 0's CSV rows, and its output for messages.
std::pair<std::vector<std::vector<std::string>>, std::string> perfRows(const AllreducePerfOptions& o, int ranks) {
  std::vector<std::string> outputs(static_cast<size_t>(ranks));
  testing::runRanksOk(ranks, [&](Communicator& comm) {
    std::ostringstream out;
    runAllreducePerf(o, comm, out);
    outputs[static_cast<size_t>(comm.rank())] = out.str();
  });
  return {csvRows(outputs[0]), outputs[0]};
}

TEST(ShapeOption, AllreducePerfSumsTheTensorAsThatMatrix) {
  AllreducePerfOptions o;
  o.shape = "64x32";
  o.lowRank = "rank=2";
  o.cases = {"powersgd/none"};
  o.warmup = 0;
  o.iterations = 1;
  o.csv = true;
  o.check = true;
  const auto [rows, output] = perfRows(o, 2);
  ASSERT_EQ(rows.size(), 1u) << output;
  const auto& r = rows[0];  // bytes,count,codec,algorithm,ranks,...,wire_bytes_per_rank (8),...,relative_error (13)
  EXPECT_EQ(r[0], "8192");
  EXPECT_EQ(r[1], "2048");
  EXPECT_EQ(r[3], "powersgd");
  EXPECT_EQ(r[8], std::to_string((64 + 32) * 2 * 4));  // 2 ranks: each ring sends its whole vector once
  const double relError = std::stod(r[13]);  // rank 2 of a random 64 x 32 sum: lossy, far from exact
  EXPECT_GT(relError, 0.1);
  EXPECT_LT(relError, 1.0);

  o.shape = "64x";
  const auto errors = runInProcess(1, [&](Communicator& comm) {
    std::ostringstream out;
    runAllreducePerf(o, comm, out);
  });
  ASSERT_TRUE(errors[0]);
  EXPECT_TRUE(testing::isA<InvalidArgument>(errors[0])) << testing::messageOf(errors[0]);
}

// Pairs that do not go together are skipped in a sweep; a run where every pair was refused (a typo in
// the codec, a bad --lowrank option) is an error that says so, not an empty table.
TEST(AllreducePerfOptions, ARunWhereNoCaseRanIsAnError) {
  for (const auto& [codec, lowRank] : {std::pair<std::string, std::string>{"bogus", ""}, {"none", "rank=2,batch=perhaps"}}) {
    AllreducePerfOptions o;
    o.algorithms = {lowRank.empty() ? "ring" : "powersgd"};
    o.codecs = {codec};
    o.lowRank = lowRank;
    o.shape = "64x32";
    o.minBytes = o.maxBytes = 8192;
    o.iterations = 1;
    o.warmup = 0;
    const auto errors = runInProcess(2, [&](Communicator& comm) {
      std::ostringstream out;
      runAllreducePerf(o, comm, out);
    });
    for (const auto& e : errors) {
      ASSERT_TRUE(e) << codec << " " << lowRank;
      EXPECT_NE(testing::messageOf(e).find("no case ran"), std::string::npos) << testing::messageOf(e);
    }
  }
}

// -a auto asks the cost model for the codec it runs: top-k rides only allgather, so that is the pick (the
// pick was once made for codec none, which chose a ring that then refused top-k).
TEST(AllreducePerfOptions, AutoPicksAnAlgorithmThatCarriesTheCodec) {
  AllreducePerfOptions o;
  o.algorithms = {"auto"};
  o.codecs = {"topk:ratio=0.01", "int8"};
  o.errorFeedback = "ef";
  o.minBytes = o.maxBytes = 1 << 16;
  o.iterations = 1;
  o.warmup = 0;
  o.csv = true;
  o.linkModel = "inter=1gbit";
  const auto [rows, output] = perfRows(o, 4);
  ASSERT_EQ(rows.size(), 2u) << output;
  EXPECT_EQ(rows[0][2], "topk:ratio=0.01");
  EXPECT_EQ(rows[0][3], "auto->allgather");
  EXPECT_EQ(rows[1][2], "int8");
  EXPECT_EQ(rows[1][3].rfind("auto->", 0), 0u) << rows[1][3];
}

}  // namespace
}  // namespace gradcomp
