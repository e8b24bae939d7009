// One MPI job with one injected fault, for tests/mpi/run_mpi_faults.py. Every rank prints one line
//   RESULT rank=<r> outcome=<ok|ExceptionType> seconds=<elapsed> message=<what>
// and exits without MPI_Finalize after a failure (finalizing next to a dead peer can block forever).
//   --fault none|kill|stop|exit|delay|mismatch|truncate   what the victim rank does
//   --fault layout|chunk     the victim is configured differently (ranks per node; pipeline chunk size):
//                            every rank must fail with CollectiveMismatch at once, not at the deadline
//   --fault spelling         the victim names the codec differently but equivalently ("int8:block=256"):
//                            every rank must succeed
//   --fault threads          rank 0 starts a second all-reduce from another thread while its first one
//                            waits for a late peer: that one is refused (CONCURRENT line), the first completes
//   --fault sweep   no fault: every algorithm on exact integer data and on normal data; prints
//                   CASE rank=<r> name=<case> hash=<fnv of the result bytes> exact=<0|1|->
//                   so the driver can check that all ranks hold the same bits.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/mpi_communicator.h"
#include "core/error.h"
#include "tests/collectives/collective_test_util.h"

namespace {

const char* typeOf(const std::exception& e) {
  using namespace gradcomp;
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const PeerFailure*>(&e)) return "PeerFailure";
  if (dynamic_cast<const CollectiveMismatch*>(&e)) return "CollectiveMismatch";
  if (dynamic_cast<const ConcurrentUse*>(&e)) return "ConcurrentUse";
  if (dynamic_cast<const DecodeError*>(&e)) return "DecodeError";
  if (dynamic_cast<const TransportError*>(&e)) return "TransportError";
  return "Error";
}

uint64_t fnv(const std::vector<float>& x) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(x.data());
  for (size_t i = 0; i < x.size() * sizeof(float); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int sweep(gradcomp::Communicator& world) {
  using namespace gradcomp;
  struct Case {
    const char *algorithm, *codec, *ef, *inter;
    bool lossless;
  };
  const Case cases[] = {
      {"vendor", "none", "none", "ring", true},        {"ring", "none", "none", "ring", true},
      {"tree", "none", "none", "ring", true},          {"allgather", "none", "none", "ring", true},
      {"randomk", "randomk:ratio=1", "none", "ring", true},
      {"hierarchical", "none", "none", "vendor", true}, {"ring", "int8", "ef", "ring", false},
      {"ring", "fp16", "none", "ring", false},         {"allgather", "topk:ratio=0.01", "ef", "ring", false},
      {"allgather", "sign", "ef", "ring", false},      {"randomk", "randomk:ratio=0.1", "ef", "ring", false},
      {"hierarchical", "int8", "none", "ring", false}, {"tree", "bf16", "none", "ring", false},
  };
  const int p = world.size(), r = world.rank();
  for (const size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}, (size_t{1} << 20) + 5}) {
    for (const auto& c : cases) {
      AllreduceConfig cfg;
      cfg.algorithm = c.algorithm;
      cfg.codec = c.codec;
      cfg.errorFeedback = c.ef;
      cfg.interAlgorithm = c.inter;
      cfg.seed = 3;
      auto algo = AllreduceAlgorithm::make(cfg);
      auto x = c.lossless ? gradcomp::testing::exactInput(r, p, n) : gradcomp::testing::normalInput(r, n);
      algo->run(x, world, {1, 0, false});
      const char* exact = "-";
      if (c.lossless) exact = x == gradcomp::testing::exactSum(p, n) ? "1" : "0";
      std::printf("CASE rank=%d name=%s/%s/%s/%s/n%zu hash=%016llx exact=%s\n", r, c.algorithm, c.inter, c.codec, c.ef, n,
                  static_cast<unsigned long long>(fnv(x)), exact);
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gradcomp;
  std::string fault = "none", codec = "int8";
  int victim = 1, ranksPerNode = 0;
  double timeout = 2.0;
  size_t n = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--fault") fault = v;
    else if (k == "--victim") victim = std::stoi(v);
    else if (k == "--timeout") timeout = std::stod(v);
    else if (k == "--n") n = std::stoul(v);
    else if (k == "--codec") codec = v;
    else if (k == "--ranks-per-node") ranksPerNode = std::stoi(v);
  }
  MpiSession session(&argc, &argv);
  CommunicatorOptions options;
  options.timeoutSeconds = timeout;
  options.ranksPerNode = ranksPerNode;
  // layout: the victim sees other nodes than its peers (one rank per node against their two); its rank
  // is needed before the communicator exists, so it comes from the launcher.
  const char* launchedRank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (fault == "layout" && launchedRank && std::atoi(launchedRank) == victim)
    options.ranksPerNode = ranksPerNode == 1 ? 2 : 1;
  auto world = session.world(options);
  const int rank = world->rank();
  std::printf("PID rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
  std::fflush(stdout);

  const auto t0 = Clock::now();
  try {
    if (fault == "sweep") {
      sweep(*world);
      std::printf("RESULT rank=%d outcome=ok seconds=%.3f message=-\n", rank,
                  std::chrono::duration<double>(Clock::now() - t0).count());
      std::fflush(stdout);
      return 0;
    }
    AllreduceConfig cfg;
    cfg.algorithm = "ring";
    cfg.codec = codec;
    if (rank == victim && fault == "chunk") cfg.chunkBytes = 64 * 1024;
    if (rank == victim && fault == "spelling" && codec == "int8") cfg.codec = "int8:rounding=nearest,block=256";
    auto algo = AllreduceAlgorithm::make(cfg);
    auto x = gradcomp::testing::normalInput(rank, n);
    if (fault == "threads") {
      // Rank 1 arrives late; meanwhile rank 0's second thread tries the communicator rank 0's first
      // thread is holding.
      if (rank == 1) usleep(500000);
      std::string refused = "-";
      std::thread other;
      if (rank == 0)
        other = std::thread([&] {
          usleep(100000);
          auto second = AllreduceAlgorithm::make(cfg);
          auto y = gradcomp::testing::normalInput(rank, n);
          try {
            second->run(y, *world, {2, 0, false});
            refused = "no";
          } catch (const std::exception& e) {
            refused = typeOf(e);
          }
        });
      algo->run(x, *world, {1, 0, false});
      if (other.joinable()) other.join();
      if (rank == 0) std::printf("CONCURRENT rank=0 second=%s\n", refused.c_str());
      std::printf("RESULT rank=%d outcome=ok seconds=%.3f message=-\n", rank,
                  std::chrono::duration<double>(Clock::now() - t0).count());
      std::fflush(stdout);
      return 0;
    }
    algo->run(x, *world);  // one good operation first: the peers are connected
    if (rank == victim) {
      if (fault == "kill") raise(SIGKILL);
      if (fault == "stop") raise(SIGSTOP);
      if (fault == "exit") _exit(0);
      if (fault == "delay") usleep(static_cast<useconds_t>(timeout * 0.5e6));  // shorter than the deadline
      if (fault == "mismatch") x.resize(n - 1);
    }
    if (fault == "truncate") {
      gradcomp::testing::FaultyCommunicator faulty(*world, [&](std::vector<std::byte>& m, int, Tag tag) {
        if (rank == victim && (tag & 0xFF) != 0 && m.size() > 64) m.resize(m.size() / 2);
      });
      algo->run(x, faulty);
    } else {
      algo->run(x, *world);
    }
    std::printf("RESULT rank=%d outcome=ok seconds=%.3f message=-\n", rank,
                std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::string what = e.what();
    for (auto& c : what)
      if (c == '\n') c = ' ';
    std::printf("RESULT rank=%d outcome=%s seconds=%.3f message=%s\n", rank, typeOf(e),
                std::chrono::duration<double>(Clock::now() - t0).count(), what.c_str());
    std::fflush(stdout);
    MpiSession::markFailed();
    _exit(3);
  }
}
