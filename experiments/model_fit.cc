#include "experiments/model_fit.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "experiments/cost_model.h"

namespace gradcomp {
namespace {

using Row = std::map<std::string, std::string>;

std::vector<Row> readCsv(const std::string& path) {
  std::ifstream f(path);
  GRADCOMP_CHECK_ARG(f.good(), "cannot read ", path);
  std::string line;
  auto chomp = [](std::string& l) {
    if (!l.empty() && l.back() == '\r') l.pop_back();  // Python's csv writes CRLF
  };
  std::getline(f, line);
  chomp(line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string h; std::getline(hs, h, ',');) header.push_back(h);
  std::vector<Row> rows;
  while (std::getline(f, line)) {
    chomp(line);
    if (line.empty()) continue;
    Row r;
    std::stringstream ls(line);
    size_t i = 0;
    for (std::string v; std::getline(ls, v, ',') && i < header.size(); ++i) r[header[i]] = v;
    rows.push_back(std::move(r));
  }
  return rows;
}

double number(const Row& r, const char* key) {
  const auto it = r.find(key);
  GRADCOMP_CHECK_ARG(it != r.end() && !it->second.empty(), "sweep CSV: column ", key, " missing");
  return std::stod(it->second);
}

// "ring", "hier/ring", "auto->ring" -> algorithm config.
AllreduceConfig configOf(const Row& r) {
  AllreduceConfig c;
  std::string a = r.at("algorithm");
  if (a.rfind("auto->", 0) == 0) a = a.substr(6);
  if (a.rfind("hier/", 0) == 0) {
    c.interAlgorithm = a.substr(5);
    a = "hierarchical";
  }
  c.algorithm = a;
  c.codec = r.at("codec");
  c.errorFeedback = c.codec == "none" ? "none" : "ef";
  return c;
}

}  // namespace

FitReport fitCostModel(const std::string& sweepCsv, std::ostream& out) {
  const auto rows = readCsv(sweepCsv);
  std::map<std::string, std::vector<const Row*>> groups;  // by configuration
  for (const auto& r : rows) groups[r.at("rate") + " " + r.at("hosts") + "x" + r.at("ranks_per_host")].push_back(&r);

  std::vector<double> errors;
  out << std::left << std::setw(16) << "config" << std::setw(30) << "case" << std::right << std::setw(12) << "bytes"
      << std::setw(13) << "measured ms" << std::setw(13) << "model ms" << std::setw(9) << "error" << "\n";
  for (const auto& [name, group] : groups) {
    std::vector<double> sizes;
    for (const Row* r : group) sizes.push_back(number(*r, "bytes"));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    auto isTraining = [&](double bytes) {
      return (std::find(sizes.begin(), sizes.end(), bytes) - sizes.begin()) % 2 == 0;
    };
    const int ranks = static_cast<int>(number(*group[0], "ranks"));
    const int perHost = static_cast<int>(number(*group[0], "ranks_per_host"));
    // Least squares t = a + b S on the uncompressed ring's training sizes.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const Row* r : group)
      if (r->at("algorithm") == "ring" && r->at("codec") == "none" && isTraining(number(*r, "bytes"))) {
        const double x = number(*r, "bytes"), y = number(*r, "time_us") * 1e-6;
        n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
      }
    if (n < 2 || ranks < 2) continue;
    const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - b * sx) / n;
    const double steps = 2.0 * (ranks - 1);
    LinkModel links;
    links.inter = {std::max(0.0, a / steps), steps / ranks / b};
    links.intra = {0, 0};  // shared memory: not the bottleneck here
    out << "# " << name << ": fitted inter link alpha " << links.inter.latencySeconds * 1e6 << " us, beta "
        << links.inter.bytesPerSecond * 8 / 1e9 << " Gbit/s\n";
    // Codec speed per case from its training rows.
    std::map<std::string, std::pair<double, double>> codecFit;  // case -> (seconds, work elements)
    for (const Row* r : group) {
      if (!isTraining(number(*r, "bytes"))) continue;
      const auto algo = AllreduceAlgorithm::make(configOf(*r));
      const auto w = algo->codecWork(static_cast<size_t>(number(*r, "count")), ranks, perHost);
      auto& f = codecFit[r->at("algorithm") + " " + r->at("codec")];
      f.first += (number(*r, "encode_us") + number(*r, "decode_us")) * 1e-6;
      f.second += w.encodeElements + w.decodeElements;
    }
    for (const Row* r : group) {
      const double bytes = number(*r, "bytes");
      if (isTraining(bytes)) continue;
      const auto algo = AllreduceAlgorithm::make(configOf(*r));
      const auto& f = codecFit[r->at("algorithm") + " " + r->at("codec")];
      const double perElement = f.second > 0 ? f.first / f.second : 0.0;
      const Topology topo{ranks / perHost, perHost, links};
      const double model = predict(*algo, {perElement, perElement}, static_cast<size_t>(number(*r, "count")), topo, 0, 0)
                               .allreduceSeconds;
      const double measured = number(*r, "time_us") * 1e-6;
      const double err = std::abs(model - measured) / measured;
      errors.push_back(err);
      out << std::left << std::setw(16) << name << std::setw(30) << (r->at("algorithm") + " " + r->at("codec"))
          << std::right << std::setw(12) << static_cast<long long>(bytes) << std::fixed << std::setprecision(2)
          << std::setw(13) << measured * 1e3 << std::setw(13) << model * 1e3 << std::setprecision(3) << std::setw(9)
          << err << std::defaultfloat << "\n";
    }
  }
  GRADCOMP_CHECK_ARG(!errors.empty(), "no held-out points: the sweep needs at least 3 sizes per configuration");
  std::nth_element(errors.begin(), errors.begin() + static_cast<ptrdiff_t>(errors.size() / 2), errors.end());
  FitReport rep{errors[errors.size() / 2], errors.size()};
  out << "median relative error on " << rep.heldOutPoints << " held-out points: " << rep.medianRelativeError << "\n";
  return rep;
}

}  // namespace gradcomp
