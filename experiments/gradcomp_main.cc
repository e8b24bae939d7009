// The `gradcomp` command line.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <unistd.h>

#include "collectives/mpi_communicator.h"
#include "core/error.h"
#include "experiments/allreduce_perf_command.h"
#include "experiments/codecs_command.h"
#include "experiments/model_command.h"
#include "experiments/model_fit.h"
#include "experiments/train_command.h"
#include "experiments/wire_command.h"

namespace {

// Under mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE; PMI launchers PMI_SIZE) use the MPI transport.
bool launchedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradcomp: gradient compression for distributed training"};
  app.require_subcommand(1);

  gradcomp::CodecsOptions codecs;
  auto* cmd = app.add_subcommand("codecs", "Compare every codec on a normal random vector");
  cmd->add_option("--n", codecs.numElements, "Number of fp32 elements")->check(CLI::Range(size_t{1}, size_t{1} << 31));
  cmd->add_flag("--csv", codecs.csv, "CSV output");
  cmd->add_option("--seed", codecs.seed, "Random seed")->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeats", codecs.repeats, "Timed runs per codec (median)")->check(CLI::Range(1, 1000));
  cmd->add_option("--codec", codecs.codecs, "Codec spec, repeatable (e.g. topk:ratio=0.001); default: all");
  cmd->add_option("--cpu-path", codecs.cpuPath, "CPU kernel path (default: the best this CPU runs)")
      ->check(CLI::IsMember({"avx512", "avx2", "scalar"}));

  gradcomp::AllreducePerfOptions perf;
  std::string transport = "auto";
  int checkValue = 0;
  auto* ar = app.add_subcommand("allreduce-perf", "All-reduce sweep over sizes x codecs x algorithms (nccl-tests style)");
  ar->add_option("-b,--minbytes", perf.minBytes, "Smallest message in bytes (K, M, G suffixes: powers of 1024)")
      ->transform(CLI::AsSizeValue(false));
  ar->add_option("-e,--maxbytes", perf.maxBytes, "Largest message in bytes")->transform(CLI::AsSizeValue(false));
  ar->add_option("-f,--stepfactor", perf.stepFactor, "Size multiplication factor between steps");
  ar->add_option("--codec", perf.codecs, "Codec spec, repeatable (default none)");
  ar->add_option("-a,--algorithm", perf.algorithms,
                 "Algorithm, repeatable: vendor ring allgather randomk hierarchical tree powersgd (default ring); "
                 "vendor-blocking: blocking MPI_Allreduce without a deadline, as a baseline; "
                 "auto: the cost model's pick per size (with --link-model)");
  ar->add_option("--case", perf.cases, "algorithm/codec pair, repeatable (instead of every -a x --codec)");
  ar->add_option("--ef", perf.errorFeedback,
                 "Error feedback for lossy codecs: none ef ef:scale=auto (unbiased codecs) ef21 ef21-sgdm dgc");
  ar->add_option("--inter", perf.interAlgorithm, "hierarchical: algorithm between nodes");
  ar->add_option("--shape", perf.shape, "The tensor as a ROWSxCOLS matrix (powersgd); replaces -b/-e");
  ar->add_option("--lowrank", perf.lowRank, "powersgd: rank=1,start_iter=0,min_compression=2,epsilon=1e-8,batch=false");
  ar->add_option("-o,--op", perf.op, "sum or avg");
  ar->add_option("-w,--warmup_iters", perf.warmup, "Warm-up iterations")->check(CLI::Range(0, 1000000));
  ar->add_option("-n,--iters", perf.iterations, "Timed iterations (median reported)")->check(CLI::Range(1, 1000000));
  ar->add_option("-c,--check", checkValue, "1: report the relative error against the exact fp32 all-reduce")
      ->check(CLI::IsMember({0, 1}));
  ar->add_flag("--csv", perf.csv, "CSV output");
  ar->add_option("--seed", perf.seed, "Seed of the data, the stochastic codecs and random-k")
      ->check(CLI::NonNegativeNumber);
  ar->add_option("--transport", transport, "auto (mpi under mpirun, else inproc), inproc, mpi");
  ar->add_option("--ranks", perf.ranks, "In-process ranks (threads)")->check(CLI::Range(1, 1024));
  ar->add_option("--ranks-per-node", perf.ranksPerNode, "Ranks per node (0: in-process one node, MPI discovers)")
      ->check(CLI::Range(0, 1024));
  ar->add_option("--link-model", perf.linkModel, "In-process pacing, e.g. inter=1gbit/50us,intra=100gbit/2us");
  ar->add_option("--timeout", perf.timeoutSeconds, "Deadline of every wait, seconds")->check(CLI::Range(1e-3, 86400.0));

  gradcomp::ModelOptions model;
  auto* md = app.add_subcommand("model", "Predicted all-reduce time, exposed communication and scaling efficiency");
  md->add_option("--nodes", model.nodes, "Nodes")->check(CLI::Range(1, 1 << 20));
  md->add_option("--ranks-per-node", model.ranksPerNode, "Ranks (GPUs) per node")->check(CLI::Range(1, 1 << 12));
  md->add_option("--links", model.links, "Link model, e.g. intra=900GB/2us,inter=50GB/10us (per rank)");
  md->add_option("--bytes", model.bytes, "Gradient bytes (fp32), K/M/G suffixes")->transform(CLI::AsSizeValue(false));
  md->add_option("--compute-ms", model.computeMs, "Forward + backward time per step, ms")->check(CLI::Range(0.0, 1e9));
  md->add_option("--overlap", model.overlap, "Share of the compute time that can hide communication (backward)")
      ->check(CLI::Range(0.0, 1.0));
  md->add_option("--codec", model.codecs, "Codec spec, repeatable");
  md->add_option("-a,--algorithm", model.algorithms, "Algorithm, repeatable (auto: the model's pick)");
  md->add_option("--ef", model.errorFeedback, "Error feedback for lossy codecs");
  md->add_option("--shape", model.shapes, "A ROWSxCOLS matrix of the gradient, repeatable (replaces --bytes)");
  md->add_option("--lowrank", model.lowRank, "powersgd: rank=,min_compression=");
  md->add_option("--encode-gbps", model.encodeGBps, "Codec encode speed, GB/s of fp32 (default: measured here)")
      ->check(CLI::PositiveNumber);
  md->add_option("--decode-gbps", model.decodeGBps, "Codec decode speed, GB/s of fp32 (default: measured here)")
      ->check(CLI::PositiveNumber);
  md->add_option("--scaling-csv", model.scalingCsv, "Write efficiency vs world size (1..1024) to this CSV");
  md->add_flag("--csv", model.csv, "CSV output");
  std::string fitCsv;
  md->add_option("--fit", fitCsv, "Fit the model to a cluster sweep CSV (scripts/cluster-sweep) and report held-out error");

  gradcomp::TrainCommandOptions train;
  train.progress = isatty(2) != 0;
  auto* tr = app.add_subcommand("train", "One data-parallel training run from a JSON config (training/train_config.h)");
  tr->add_option("config", train.file, "Config file (JSON)")->required();
  tr->add_option("--set", train.sets, "key=value override, repeatable (e.g. --set codec=int8 --set workers=8)");
  tr->add_option("--out", train.out, "Parent of the run directory (default results/train)");
  tr->add_flag("--resume", train.resume, "Continue from the run directory's checkpoint (an error if there is none)");
  tr->add_flag("--overwrite", train.overwrite, "Replace the results of an earlier run of the same name");
  tr->add_flag("--progress,!--no-progress", train.progress, "Progress bar on stderr (default: when it is a terminal)");
  gradcomp::TrainCommandOptions sweepOptions;
  sweepOptions.progress = train.progress;
  auto* sw = app.add_subcommand("sweep", "Every run of a sweep file (cartesian product of lists); finished runs are skipped");
  sw->add_option("sweep", sweepOptions.file, "Sweep file (JSON: base, grid, cases)")->required();
  sw->add_option("--set", sweepOptions.sets, "key=value override of the base config, repeatable");
  sw->add_option("--out", sweepOptions.out, "Sweep directory (default results/sweep)");
  sw->add_flag("--progress,!--no-progress", sweepOptions.progress, "Progress bar on stderr");
  sw->add_flag("--no-rerun", sweepOptions.noRerun,
               "A stored run made from another configuration is an error (default: run it again)");

  gradcomp::EncodeCommandOptions enc;
  auto* en = app.add_subcommand("encode", "Encode raw float32 values (a file) into a wire buffer (a file)");
  en->add_option("--codec", enc.codec, "Codec spec (e.g. int8:block=256)")->required();
  en->add_option("--in", enc.input, "Raw little-endian float32 input")->required();
  en->add_option("--out", enc.output, "Wire buffer output")->required();
  en->add_option("--residual-in", enc.residualIn, "Error-feedback residual (raw float32) to add before encoding");
  en->add_option("--residual-out", enc.residualOut, "Where to write the new residual (raw float32)");
  en->add_option("--seed", enc.seed, "Seed of the stochastic codecs")->check(CLI::NonNegativeNumber);
  en->add_option("--rank", enc.rank, "Rank (stochastic codecs' stream)")->check(CLI::Range(0u, 0xFFFFFFFFu));
  en->add_option("--step", enc.step, "Step (stochastic codecs' stream)")->check(CLI::Range(0u, 0xFFFFFFFFu));
  en->add_option("--tensor", enc.tensorId, "Tensor id (stochastic codecs' stream)")->check(CLI::Range(0u, 0xFFFFFFFFu));
  gradcomp::DecodeCommandOptions dec;
  auto* de = app.add_subcommand("decode", "Decode a wire buffer (a file, any codec) into raw float32 values");
  de->add_option("--in", dec.input, "Wire buffer")->required();
  de->add_option("--out", dec.output, "Raw little-endian float32 output")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (cmd->parsed()) gradcomp::runCodecsCommand(codecs, std::cout);
    if (en->parsed()) gradcomp::runEncodeCommand(enc, std::cout);
    if (de->parsed()) gradcomp::runDecodeCommand(dec, std::cout);
    if (md->parsed()) {
      if (fitCsv.empty()) gradcomp::runModelCommand(model, std::cout);
      else gradcomp::fitCostModel(fitCsv, std::cout);
    }
    if (ar->parsed()) {
      perf.check = checkValue != 0;
      const bool mpi = transport == "mpi" || (transport == "auto" && launchedByMpirun());
      if (!mpi && transport != "auto" && transport != "inproc")
        GRADCOMP_THROW(gradcomp::InvalidArgument, "unknown transport '", transport, "' (auto, inproc, mpi)");
      if (mpi) {
        gradcomp::MpiSession session(&argc, &argv);
        gradcomp::CommunicatorOptions co;
        co.timeoutSeconds = perf.timeoutSeconds;
        co.ranksPerNode = perf.ranksPerNode;
        auto world = session.world(co);
        gradcomp::runAllreducePerf(perf, *world, std::cout);
      } else {
        gradcomp::runAllreducePerfInProcess(perf, std::cout);
      }
    }
    if (tr->parsed() || sw->parsed()) {
      std::unique_ptr<gradcomp::MpiSession> session;
      std::unique_ptr<gradcomp::Communicator> world;
      if (launchedByMpirun()) {
        session = std::make_unique<gradcomp::MpiSession>(&argc, &argv);
        world = session->world();
      }
      if (tr->parsed()) {
        gradcomp::runTrainCommand(train, world.get(), std::cout);
      } else if (const size_t failed = gradcomp::runSweepCommand(sweepOptions, world.get(), std::cout)) {
        std::cerr << "gradcomp: " << failed << " sweep run(s) failed (listed above)\n";
        return 1;
      }
    }
  } catch (const gradcomp::Error& e) {
    std::cerr << "gradcomp: " << e.what() << "\n";
    gradcomp::MpiSession::markFailed();
    return 1;
  } catch (const std::exception& e) {
    // Anything else (a filesystem or allocation failure) is still one line and a non-zero exit, never an
    // abort: the library's own errors name their cause above; this names what the system said.
    std::cerr << "gradcomp: " << e.what() << "\n";
    gradcomp::MpiSession::markFailed();
    return 1;
  }
  return 0;
}
