#include "compressors/codec_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace gradcomp {
namespace {

// A double in the shortest decimal form that reads back to the same value (0.1, 1e+30, 0.0625).
std::string normalNumber(double x) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace

CodecSpec CodecSpec::parse(const std::string& text) {
  CodecSpec spec;
  const auto colon = text.find(':');
  spec.name_ = text.substr(0, colon);
  GRADCOMP_CHECK_ARG(!spec.name_.empty(), "codec spec '", text, "' has no codec name");
  if (colon == std::string::npos) return spec;
  std::string rest = text.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const auto comma = rest.find(',', pos);
    const std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto eq = item.find('=');
    GRADCOMP_CHECK_ARG(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "codec spec '", text,
                       "': parameter '", item, "' is not key=value");
    const std::string key = item.substr(0, eq);
    GRADCOMP_CHECK_ARG(!spec.params_.count(key), "codec spec '", text, "': parameter '", key, "' given twice");
    spec.params_[key] = item.substr(eq + 1);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return spec;
}

std::string CodecSpec::toString() const { return withParameters(params_); }

std::string CodecSpec::canonical() const { return withParameters(resolved_); }

std::string CodecSpec::without(const std::set<std::string>& keys) const {
  std::map<std::string, std::string> kept;
  for (const auto& [k, v] : params_)
    if (!keys.count(k)) kept.emplace(k, v);
  return withParameters(kept);
}

std::string CodecSpec::withParameters(const std::map<std::string, std::string>& params) const {
  std::string s = name_;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

std::string CodecSpec::getString(const std::string& key, const std::string& fallback) const {
  const auto it = params_.find(key);
  if (it == params_.end()) {
    resolved_[key] = fallback;
    return fallback;
  }
  used_.insert(key);
  resolved_[key] = it->second;
  return it->second;
}

std::string CodecSpec::getChoice(const std::string& key, const std::string& fallback,
                                 const std::vector<std::string>& allowed) const {
  const std::string v = getString(key, fallback);
  for (const auto& a : allowed)
    if (a == v) return v;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
  GRADCOMP_THROW(InvalidArgument, "'", name_, "': ", key, "=", v, " is not one of ", list);
}

std::string CodecSpec::getChoiceOmittedAtDefault(const std::string& key, const std::string& fallback,
                                                 const std::vector<std::string>& allowed) const {
  const std::string v = getChoice(key, fallback, allowed);
  if (v == fallback) resolved_.erase(key);
  return v;
}

uint64_t CodecSpec::getUInt(const std::string& key, uint64_t fallback, uint64_t min, uint64_t max) const {
  if (!has(key)) {
    resolved_[key] = std::to_string(fallback);
    return fallback;
  }
  const std::string v = getString(key, "");
  errno = 0;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  GRADCOMP_CHECK_ARG(errno == 0 && end && *end == '\0' && !v.empty() && v[0] != '-', "'", name_, "': ",
                     key, "=", v, " is not a non-negative integer");
  GRADCOMP_CHECK_ARG(x >= min && x <= max, "'", name_, "': ", key, "=", v, " is outside [", min, ", ",
                     max, "]");
  resolved_[key] = std::to_string(x);
  return x;
}

double CodecSpec::getDouble(const std::string& key, double fallback, double minExclusive,
                            double maxInclusive) const {
  if (!has(key)) {
    resolved_[key] = normalNumber(fallback);
    return fallback;
  }
  const std::string v = getString(key, "");
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  GRADCOMP_CHECK_ARG(end && *end == '\0' && !v.empty() && std::isfinite(x), "'", name_, "': ", key, "=",
                     v, " is not a finite number");
  GRADCOMP_CHECK_ARG(x > minExclusive && x <= maxInclusive, "'", name_, "': ", key, "=", v,
                     " is outside (", minExclusive, ", ", maxInclusive, "]");
  resolved_[key] = normalNumber(x);
  return x;
}

bool CodecSpec::getBool(const std::string& key, bool fallback) const {
  const std::string v = getChoice(key, fallback ? "true" : "false", {"true", "false", "1", "0"});
  const bool b = v == "true" || v == "1";
  resolved_[key] = b ? "true" : "false";
  return b;
}

bool CodecSpec::getBoolOmittedAtDefault(const std::string& key, bool fallback) const {
  const bool b = getBool(key, fallback);
  if (b == fallback) resolved_.erase(key);
  return b;
}

void CodecSpec::checkAllUsed() const {
  for (const auto& [k, v] : params_)
    GRADCOMP_CHECK_ARG(used_.count(k), "'", name_, "' has no parameter '", k, "'");
}

}  // namespace gradcomp
