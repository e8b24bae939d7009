// A codec named with its parameters, as users write it: "int8:block=256,rounding=stochastic".
// Each codec's factory takes the parameters it knows; any parameter left unread is an error, so a typo
// never silently falls back to a default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gradcomp {

class CodecSpec {
 public:
  static CodecSpec parse(const std::string& text);  // throws InvalidArgument naming the bad part

  const std::string& name() const { return name_; }
  std::string toString() const;
  // The spec with every parameter the factory read, defaults included, each value in one normal form:
  // "int8" and "int8:block=256" (and "int8:block=0256") all give "int8:block=256,rounding=nearest". What
  // ranks compare before they exchange data, so equivalent spellings agree and different settings never do.
  std::string canonical() const;

  bool has(const std::string& key) const { return params_.count(key) != 0; }
  std::string getString(const std::string& key, const std::string& fallback) const;
  std::string getChoice(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& allowed) const;
  // As getChoice, but canonical() leaves the parameter out while it has its fallback value: for parameters
  // added after canonical names were stored (result files, configs) and compared by ranks, so those names
  // stay what they were and "qsgd" and "qsgd:rounding_bits=16" still agree.
  std::string getChoiceOmittedAtDefault(const std::string& key, const std::string& fallback,
                                        const std::vector<std::string>& allowed) const;
  uint64_t getUInt(const std::string& key, uint64_t fallback, uint64_t min, uint64_t max) const;
  double getDouble(const std::string& key, double fallback, double minExclusive, double maxInclusive) const;
  bool getBool(const std::string& key, bool fallback) const;
  // As getBool, left out of canonical() at its fallback (see getChoiceOmittedAtDefault).
  bool getBoolOmittedAtDefault(const std::string& key, bool fallback) const;

  // Throws if a parameter was never read by the factory.
  void checkAllUsed() const;

  void set(const std::string& key, const std::string& value) { params_[key] = value; }
  // The spec as written, less the parameters in `keys` (a codec's rotation, for its unrotated twin).
  std::string without(const std::set<std::string>& keys) const;

 private:
  std::string withParameters(const std::map<std::string, std::string>& params) const;  // name:k=v,...

  std::string name_;
  std::map<std::string, std::string> params_;
  mutable std::set<std::string> used_;
  mutable std::map<std::string, std::string> resolved_;  // every parameter read, in normal form
};

}  // namespace gradcomp
