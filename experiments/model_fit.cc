#include "experiments/model_fit.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "collectives/cost_model.h"

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

  std::vector<double> errors, fittedErrors;
  out << std::left << std::setw(16) << "config" << std::setw(30) << "case" << std::right << std::setw(12) << "bytes"
      << std::setw(13) << "measured ms" << std::setw(13) << "model ms" << std::setw(9) << "error" << std::setw(13) << "fitted ms" << std::setw(9) << "error"
      << "\n";
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
    // Codec cost per case, two ways, both from its training rows only:
    //  measured: the encode + decode time the run reported, per element of codec work (additive: wire
    //            time plus codec time);
    //  fitted:   the coefficient c >= 0 that best explains time - wire = c * work (least squares in
    //            relative terms), which takes in what the additive form misses: the compressed ring
    //            overlapping codec work with the wire, and ranks sharing cores.
    const Topology topo{ranks / perHost, perHost, links};
    struct CaseFit {
      double codecSeconds = 0, work = 0;  // measured
      double num = 0, den = 0;            // fitted: sum (t - wire) w / t^2, sum w^2 / t^2
    };
    std::map<std::string, CaseFit> fits;
    for (const Row* r : group) {
      if (!isTraining(number(*r, "bytes"))) continue;
      const auto algo = AllreduceAlgorithm::make(configOf(*r));
      const auto count = static_cast<size_t>(number(*r, "count"));
      const auto w = algo->codecWork(count, ranks, perHost);
      const double work = w.encodeElements + w.decodeElements + w.rotateElements;  // the ring's own rotations too
      const double t = number(*r, "time_us") * 1e-6;
      const double wire = algo->predictSeconds(count, ranks, perHost, links);
      auto& f = fits[r->at("algorithm") + " " + r->at("codec")];
      f.codecSeconds += (number(*r, "encode_us") + number(*r, "decode_us")) * 1e-6;
      f.work += work;
      f.num += (t - wire) * work / (t * t);
      f.den += work * work / (t * t);
    }
    for (const Row* r : group) {
      const double bytes = number(*r, "bytes");
      if (isTraining(bytes)) continue;
      const auto algo = AllreduceAlgorithm::make(configOf(*r));
      const auto& f = fits[r->at("algorithm") + " " + r->at("codec")];
      const double measuredPerElement = f.work > 0 ? f.codecSeconds / f.work : 0.0;
      const double fittedPerElement = f.den > 0 ? std::max(0.0, f.num / f.den) : 0.0;
      const auto count = static_cast<size_t>(number(*r, "count"));
      // One cost per element of codec work, whichever kind (encode, decode, the rotated ring's rotations).
      const auto uniform = [](double c) { return CodecSpeed{c, c, c, c, c}; };
      const double model = predict(*algo, uniform(measuredPerElement), count, topo, 0, 0).allreduceSeconds;
      const double fitted = predict(*algo, uniform(fittedPerElement), count, topo, 0, 0).allreduceSeconds;
      const double measured = number(*r, "time_us") * 1e-6;
      const double err = std::abs(model - measured) / measured, errFitted = std::abs(fitted - measured) / measured;
      errors.push_back(err);
      fittedErrors.push_back(errFitted);
      out << std::left << std::setw(16) << name << std::setw(30) << (r->at("algorithm") + " " + r->at("codec"))
          << std::right << std::setw(12) << static_cast<long long>(bytes) << std::fixed << std::setprecision(2)
          << std::setw(13) << measured * 1e3 << std::setw(13) << model * 1e3 << std::setprecision(3) << std::setw(9)
          << err << std::setprecision(2) << std::setw(13) << fitted * 1e3 << std::setprecision(3) << std::setw(9)
          << errFitted << std::defaultfloat << "\n";
    }
  }
  GRADCOMP_CHECK_ARG(!errors.empty(), "no held-out points: the sweep needs at least 3 sizes per configuration");
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  FitReport rep{median(errors), errors.size(), median(fittedErrors)};
  out << "median relative error on " << rep.heldOutPoints << " held-out points: " << rep.medianRelativeError
      << " (codec cost as measured), " << rep.medianRelativeErrorFittedCodec << " (codec cost fitted)\n";
  return rep;
}

}  // namespace gradcomp
