#include "experiments/train_command.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "collectives/inprocess_communicator.h"
#include "collectives/link_model.h"
#include "collectives/small_collectives.h"
#include "core/error.h"

namespace gradcomp {

namespace {

nlohmann::json readJsonFile(const std::string& path) {
  std::ifstream in(path);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    GRADCOMP_THROW(InvalidArgument, "'", path, "' is not valid JSON: ", e.what());
  }
  GRADCOMP_CHECK_ARG(j.is_object(), "'", path, "' must hold a JSON object {\"key\": value, ...}, it holds ",
                     j.type_name() == std::string("array") ? "an " : "a ", j.type_name());
  return j;
}

// The files a run writes into its directory (and the only ones --overwrite and a sweep rerun remove).
const char* const kRunFiles[] = {"config.json", "metrics.csv", "summary.json", "failed.json"};

bool holdsARun(const std::filesystem::path& dir) {
  for (const char* f : kRunFiles)
    if (std::filesystem::exists(dir / f)) return true;
  return std::filesystem::exists(dir / "checkpoint");
}

void removeRun(const std::filesystem::path& dir) {
  for (const char* f : kRunFiles) std::filesystem::remove(dir / f);
  std::filesystem::remove_all(dir / "checkpoint");
}

// Creates `dir` (and its parents) and proves it writable, or throws naming the path and the cause: a
// parent that is a regular file, a directory without write permission, a full disk.
void ensureWritableDirectory(const std::filesystem::path& dir, const char* what) {
  for (std::filesystem::path p = dir; !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) {
      GRADCOMP_CHECK_ARG(std::filesystem::is_directory(p, ec), what, " '", dir.string(), "': '", p.string(),
                         "' exists and is not a directory");
      break;
    }
    if (p == p.parent_path()) break;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GRADCOMP_CHECK_ARG(!ec, what, " '", dir.string(), "' cannot be created: ", ec.message());
  const std::filesystem::path probe = dir / ".gradcomp-write-test";
  { std::ofstream(probe) << "ok\n"; }
  GRADCOMP_CHECK_ARG(std::filesystem::exists(probe, ec), what, " '", dir.string(), "' is not writable");
  std::filesystem::remove(probe, ec);
}

// A run name from a value: letters, digits and . _ + - = kept, anything else becomes '-'.
std::string slug(const std::string& text) {
  std::string s;
  for (char c : text) s += (std::isalnum(static_cast<unsigned char>(c)) || std::string("._+-=%,").find(c) != std::string::npos) ? c : '-';
  return s;
}

std::string valueText(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Every rank of an MPI sweep reaches this point before any goes on (a one-byte all-gather).
void barrier(Communicator& comm) {
  const Communicator::OperationScope scope(comm, "sweep barrier");
  const std::byte mine{1};
  allgatherSmall(comm, std::span(&mine, 1), makeTag(scope.sequence(), 0xD0), "sweep barrier");
}

}  // namespace

TrainResult runTraining(const TrainConfig& config, Communicator* mpiWorld, const TrainOptions& options) {
  const bool mpi = config.transport == "mpi" || (config.transport == "auto" && mpiWorld != nullptr);
  if (mpi) {
    GRADCOMP_CHECK_ARG(mpiWorld != nullptr, "transport 'mpi' needs the job to be started by mpirun");
    TrainConfig c = config;
    c.workers = mpiWorld->size();  // the job's size decides
    mpiWorld->setTimeoutSeconds(c.timeoutSeconds);
    return trainOnCommunicator(c, loadTrainingData(c), *mpiWorld, options);
  }
  const DataSplit data = loadTrainingData(config);  // loaded once, read by every worker thread
  CommunicatorOptions co;
  co.timeoutSeconds = config.timeoutSeconds;
  co.ranksPerNode = config.ranksPerNode;
  TrainResult result;
  std::mutex mutex;
  const auto errors = runInProcess(
      config.workers,
      [&](Communicator& comm) {
        TrainResult mine = trainOnCommunicator(config, data, comm, options);
        if (comm.rank() == 0) {
          std::lock_guard lock(mutex);
          result = std::move(mine);
        }
      },
      co, LinkModel::parse(config.linkModel));
  // The first failure is the cause; the others are peers failing because of it.
  for (const auto& e : errors)
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const PeerFailure&) {
        continue;
      }
    }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return result;
}

void printSummaryTable(const std::vector<nlohmann::json>& summaries, std::ostream& out) {
  if (summaries.empty()) return;
  std::vector<std::string> modelColumns;
  for (const auto& [key, value] : summaries.front().items())
    if (key.rfind("model_step_ms[", 0) == 0) modelColumns.push_back(key);
  // Slowest network first; labelled by its inter-node rate ("ms/step 1gbit").
  const auto linkOf = [](const std::string& column) { return column.substr(14, column.size() - 15); };
  std::sort(modelColumns.begin(), modelColumns.end(), [&](const std::string& a, const std::string& b) {
    return LinkModel::parse(linkOf(a)).inter.bytesPerSecond < LinkModel::parse(linkOf(b)).inter.bytesPerSecond;
  });
  const auto num = [](const nlohmann::json& s, const char* key) { return s.contains(key) ? s.at(key).get<double>() : -1.0; };
  char line[512];
  // Test accuracy as the mean of the last five evaluations (summary.json's mean_test_accuracy): one
  // evaluation alone swings by points between evaluations for the noisier codecs.
  std::snprintf(line, sizeof line, "%-28s %9s %12s %7s %9s %9s", "run", "acc last5", "bytes/step", "ratio", "enc ms", "dec ms");
  out << line;
  for (const auto& c : modelColumns) {
    std::string link = linkOf(c);
    if (link.rfind("inter=", 0) == 0) link = link.substr(6, link.find('/') == std::string::npos ? std::string::npos : link.find('/') - 6);
    const std::string label = "ms/step " + link;
    std::snprintf(line, sizeof line, " %16s", label.substr(0, 16).c_str());
    out << line;
  }
  out << "\n";
  for (const auto& s : summaries) {
    if (s.value("status", "") == "failed") {
      std::snprintf(line, sizeof line, "%-28s failed: %.90s\n", s.at("name").get<std::string>().substr(0, 28).c_str(),
                    s.at("error").get<std::string>().c_str());
      out << line;
      continue;
    }
    const double acc = num(s, "mean_test_accuracy");
    std::snprintf(line, sizeof line, "%-28s %8.2f%% %12.0f %6.1fx %9.3f %9.3f", s.at("name").get<std::string>().substr(0, 28).c_str(),
                  acc >= 0 ? 100 * acc : -1.0, num(s, "bytes_per_step"), num(s, "compression_ratio"), num(s, "encode_ms"),
                  num(s, "decode_ms"));
    out << line;
    for (const auto& c : modelColumns) {
      std::snprintf(line, sizeof line, " %16.3f", s.at(c).get<double>());
      out << line;
    }
    out << "\n";
  }
}

void runTrainCommand(const TrainCommandOptions& o, Communicator* mpiWorld, std::ostream& out) {
  nlohmann::json j = readJsonFile(o.file);
  for (const auto& s : o.sets) applyOverride(j, s);
  const TrainConfig config = TrainConfig::fromJson(j);
  GRADCOMP_CHECK_ARG(!(o.resume && o.overwrite), "--resume and --overwrite contradict each other");
  TrainOptions to;
  to.runDir = (o.out.empty() ? std::string("results/train") : o.out) + "/" + config.name;
  to.resume = o.resume ? ResumeMode::Required : ResumeMode::Never;
  to.progress = o.progress;
  // Rank 0 owns the run directory; under MPI the other ranks only write their checkpoints into it.
  if (!mpiWorld || mpiWorld->rank() == 0) {
    ensureWritableDirectory(o.out.empty() ? "results/train" : o.out, "--out");
    if (!o.resume && holdsARun(to.runDir)) {
      GRADCOMP_CHECK_ARG(o.overwrite, "run directory '", to.runDir, "' holds an earlier run; pass --overwrite to "
                         "replace it, --resume to continue it, or --set name=... for another run");
      removeRun(to.runDir);
    }
  }
  const TrainResult r = runTraining(config, mpiWorld, to);
  if (mpiWorld && mpiWorld->rank() != 0) return;
  if (!r.completed) {
    out << "stopped after step " << (r.metrics.empty() ? 0 : r.metrics.back().step + 1) << " of " << config.steps
        << " (stop_after); checkpoint in " << to.runDir << "/checkpoint\n";
    return;
  }
  printSummaryTable({r.summary}, out);
  out << "run directory: " << to.runDir << "\n";
}

std::vector<nlohmann::json> expandSweep(const nlohmann::json& sweep) {
  GRADCOMP_CHECK_ARG(sweep.is_object(), "a sweep must be a JSON object");
  for (const auto& [key, value] : sweep.items())
    GRADCOMP_CHECK_ARG(key == "base" || key == "grid" || key == "cases", "unknown sweep key '", key,
                       "' (base, grid, cases)");
  const nlohmann::json base = sweep.value("base", nlohmann::json::object());
  const nlohmann::json grid = sweep.value("grid", nlohmann::json::object());
  nlohmann::json cases = sweep.value("cases", nlohmann::json::array({nlohmann::json::object()}));
  GRADCOMP_CHECK_ARG(base.is_object() && grid.is_object() && cases.is_array() && !cases.empty(),
                     "sweep: base and grid must be objects, cases a non-empty array");
  std::vector<std::pair<std::string, nlohmann::json>> axes;
  for (const auto& [key, values] : grid.items()) {
    GRADCOMP_CHECK_ARG(values.is_array() && !values.empty(), "sweep grid '", key, "' must be a non-empty list");
    axes.emplace_back(key, values);
  }
  std::vector<nlohmann::json> runs;
  std::map<std::string, int> seen;
  for (const auto& c : cases) {
    GRADCOMP_CHECK_ARG(c.is_object(), "sweep case ", c.dump(), " is not an object");
    std::vector<size_t> index(axes.size(), 0);
    for (;;) {
      nlohmann::json run = base;
      std::string name = c.contains("name") ? c.at("name").get<std::string>() : "";
      for (const auto& [key, value] : c.items())
        if (key != "name") run[key] = value;
      for (size_t a = 0; a < axes.size(); ++a) {
        const auto& v = axes[a].second[index[a]];
        run[axes[a].first] = v;
        name += (name.empty() ? "" : ",") + axes[a].first + "=" + valueText(v);
      }
      if (name.empty()) name = base.value("name", std::string("run"));
      run["name"] = slug(name);
      GRADCOMP_CHECK_ARG(seen[run["name"]]++ == 0, "sweep has two runs named '", run["name"].get<std::string>(), "'");
      TrainConfig::fromJson(run);  // validate every run before the first starts
      runs.push_back(run);
      size_t a = 0;
      for (; a < axes.size(); ++a) {
        if (++index[a] < axes[a].second.size()) break;
        index[a] = 0;
      }
      if (a == axes.size()) break;
    }
  }
  return runs;
}

size_t runSweepCommand(const TrainCommandOptions& o, Communicator* mpiWorld, std::ostream& out) {
  nlohmann::json sweep = readJsonFile(o.file);
  if (!sweep.contains("base")) sweep["base"] = nlohmann::json::object();
  for (const auto& s : o.sets) applyOverride(sweep["base"], s);
  const auto runs = expandSweep(sweep);
  const std::string dir = o.out.empty() ? "results/sweep" : o.out;
  const bool leader = !mpiWorld || mpiWorld->rank() == 0;
  if (leader) ensureWritableDirectory(dir, "--out");
  std::vector<nlohmann::json> summaries;
  std::vector<std::string> failures;
  for (size_t i = 0; i < runs.size(); ++i) {
    const TrainConfig config = TrainConfig::fromJson(runs[i]);
    const std::string runDir = dir + "/runs/" + config.name;
    const std::string summaryPath = runDir + "/summary.json", storedConfig = runDir + "/config.json";
    std::ostringstream prefixText;  // (not "[" + std::to_string(...): GCC 12 reports a false -Wrestrict there)
    prefixText << "[" << i + 1 << "/" << runs.size() << "] " << config.name;
    const std::string prefix = prefixText.str();
    // A stored run counts only if it was made from this very configuration: a changed sweep file or
    // --set must never be answered with old results (or resume from another configuration's checkpoint).
    const bool stored = std::filesystem::exists(storedConfig);
    const std::string storedHash = stored ? configSha256(TrainConfig::fromJson(readJsonFile(storedConfig))) : "";
    const bool current = stored && storedHash == configSha256(config);
    const bool finished = current && std::filesystem::exists(summaryPath);
    if (mpiWorld) barrier(*mpiWorld);  // every rank has read the stored files before any is removed
    if (stored && !current) {
      GRADCOMP_CHECK_ARG(!o.noRerun, "sweep run '", config.name, "' in '", runDir, "' was made from another ",
                         "configuration (config_sha256 ", storedHash.substr(0, 12), ", this sweep's is ",
                         configSha256(config).substr(0, 12), "); without --no-rerun it is run again");
      if (leader) out << prefix << ": stored run is from another configuration, running it again" << std::endl;
      if (leader) removeRun(runDir);  // in-process: every rank's checkpoint is this process's
      else std::filesystem::remove(runDir + "/checkpoint/rank" + std::to_string(mpiWorld->rank()) + ".bin");
    } else if (finished) {
      if (leader) {
        out << prefix << ": done before, skipped\n";
        summaries.push_back(readJsonFile(summaryPath));
      }
      continue;
    }
    if (leader) out << prefix << std::endl;
    TrainOptions to;
    to.runDir = runDir;
    to.resume = ResumeMode::IfPresent;
    to.progress = o.progress;
    try {
      if (leader) std::filesystem::remove(runDir + "/failed.json");  // retried now
      const TrainResult r = runTraining(config, mpiWorld, to);
      if (leader && r.completed) summaries.push_back(r.summary);
    } catch (const Error& e) {
      // One diverging or misconfigured run must not cost the rest of the grid. Threads recover; an MPI
      // job whose collective failed has a dead communicator, so there the sweep stops.
      if (mpiWorld) throw;
      out << "  failed: " << e.what() << std::endl;
      nlohmann::json failed = {{"name", config.name}, {"codec", config.codec}, {"ef", config.errorFeedback},
                               {"status", "failed"}, {"error", e.what()}};
      std::filesystem::create_directories(runDir);
      std::ofstream(runDir + "/failed.json") << failed.dump(2) << "\n";  // retried by the next sweep
      summaries.push_back(failed);
      failures.push_back(config.name);
    }
  }
  if (!leader) return failures.size();
  // results.csv: the union of the scalar columns, in first-seen order (lists such as bucket_elements stay
  // in each run's summary.json).
  std::vector<std::string> columns = summaryColumns(TrainConfig::fromJson(runs.front()));
  for (const auto& s : summaries)
    for (const auto& [key, value] : s.items())
      if (!value.is_structured() && std::find(columns.begin(), columns.end(), key) == columns.end())
        columns.push_back(key);
  std::ofstream csv(dir + "/results.csv");
  for (size_t c = 0; c < columns.size(); ++c) csv << (c ? "," : "") << '"' << columns[c] << '"';
  csv << "\n";
  for (const auto& s : summaries) {
    for (size_t c = 0; c < columns.size(); ++c) {
      if (c) csv << ",";
      if (!s.contains(columns[c])) continue;
      const auto& v = s.at(columns[c]);
      if (v.is_string()) {
        std::string text = v.get<std::string>();
        for (size_t p = text.find('"'); p != std::string::npos; p = text.find('"', p + 2)) text.insert(p, 1, '"');
        csv << '"' << text << '"';
      } else if (v.is_boolean()) {
        csv << (v.get<bool>() ? 1 : 0);
      } else if (v.is_number()) {
        csv << std::setprecision(10) << v.get<double>();
      }
    }
    csv << "\n";
  }
  out << "\n";
  printSummaryTable(summaries, out);
  out << "results: " << dir << "/results.csv, runs in " << dir << "/runs/\n";
  if (!failures.empty()) {
    out << failures.size() << " of " << runs.size() << " runs failed (their failed.json says why):";
    for (const auto& f : failures) out << ' ' << f;
    out << "\n";
  }
  return failures.size();
}

}  // namespace gradcomp
