#include "collectives/link_model.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace gradcomp {
namespace {

double parseNumberWithUnit(const std::string& text, const char* what, bool rate) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    GRADCOMP_THROW(InvalidArgument, "link model: ", what, " '", text, "' is not a number with a unit");
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (rate) {
    if (unit == "bit") scale = 1.0 / 8;
    else if (unit == "kbit") scale = 1e3 / 8;
    else if (unit == "mbit") scale = 1e6 / 8;
    else if (unit == "gbit") scale = 1e9 / 8;
    else if (unit == "b") scale = 1;
    else if (unit == "kb") scale = 1e3;
    else if (unit == "mb") scale = 1e6;
    else if (unit == "gb") scale = 1e9;
  } else {
    if (unit == "s") scale = 1;
    else if (unit == "ms") scale = 1e-3;
    else if (unit == "us") scale = 1e-6;
    else if (unit == "ns") scale = 1e-9;
  }
  GRADCOMP_CHECK_ARG(scale > 0, "link model: ", what, " '", text, "' has unknown unit '", unit, "' (",
                     rate ? "bit, kbit, mbit, gbit, B, KB, MB, GB per second" : "s, ms, us, ns", ")");
  GRADCOMP_CHECK_ARG(std::isfinite(v) && v >= 0, "link model: ", what, " '", text, "' must be >= 0");
  return v * scale;
}

}  // namespace

LinkModel LinkModel::parse(const std::string& text) {
  LinkModel m;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    GRADCOMP_CHECK_ARG(eq != std::string::npos, "link model: '", item, "' is not class=rate[/latency]");
    const std::string cls = item.substr(0, eq), value = item.substr(eq + 1);
    GRADCOMP_CHECK_ARG(cls == "intra" || cls == "inter", "link model: unknown link class '", cls,
                       "' (intra or inter)");
    LinkSpec s;
    const auto slash = value.find('/');
    s.bytesPerSecond = parseNumberWithUnit(value.substr(0, slash), "rate", true);
    if (slash != std::string::npos) s.latencySeconds = parseNumberWithUnit(value.substr(slash + 1), "latency", false);
    (cls == "intra" ? m.intra : m.inter) = s;
  }
  return m;
}

std::string LinkModel::describe() const {
  std::ostringstream o;
  auto one = [&](const char* name, const LinkSpec& s) {
    o << name << '=';
    if (s.bytesPerSecond > 0) o << s.bytesPerSecond * 8 / 1e9 << "gbit";
    else o << "unlimited";
    o << '/' << s.latencySeconds * 1e6 << "us";
  };
  one("intra", intra);
  o << ',';
  one("inter", inter);
  return o.str();
}

}  // namespace gradcomp
