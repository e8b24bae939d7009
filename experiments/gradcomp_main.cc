// The `gradcomp` command line.
#include <CLI/CLI.hpp>
#include <iostream>

#include "core/error.h"
#include "experiments/codecs_command.h"

int main(int argc, char** argv) {
  CLI::App app{"gradcomp: gradient compression for distributed training"};
  app.require_subcommand(1);

  gradcomp::CodecsOptions codecs;
  auto* cmd = app.add_subcommand("codecs", "Compare every codec on a normal random vector");
  cmd->add_option("--n", codecs.numElements, "Number of fp32 elements")->check(CLI::Range(size_t{1}, size_t{1} << 31));
  cmd->add_flag("--csv", codecs.csv, "CSV output");
  cmd->add_option("--seed", codecs.seed, "Random seed");
  cmd->add_option("--repeats", codecs.repeats, "Timed runs per codec (median)")->check(CLI::Range(1, 1000));
  cmd->add_option("--codec", codecs.codecs, "Codec spec, repeatable (e.g. topk:ratio=0.001); default: all");

  CLI11_PARSE(app, argc, argv);
  try {
    if (cmd->parsed()) gradcomp::runCodecsCommand(codecs, std::cout);
  } catch (const gradcomp::Error& e) {
    std::cerr << "gradcomp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
