#include "training/train_config.h"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/error.h"

namespace gradcomp {

namespace {

// Every key of a config with its type and accepted range. Values are read strictly: a number of the wrong
// kind, outside its range, fractional where an integer is expected, or of another JSON type is an error
// naming the key and the range -- never a wrap-around (steps=-5 as 2^64-5) or a silent truncation
// (steps=600.7 as 600).
enum class Kind { String, Integer, Number, Boolean, StringList, Object };

struct Key {
  const char* name;
  Kind kind;
  double min = 0, max = 0;  // Integer / Number: the accepted closed range (Number: minExclusive below)
  bool minExclusive = false;
};

constexpr double kMaxSteps = 1e12;
constexpr Key kKeys[] = {
    {"name", Kind::String},
    {"model", Kind::String},
    {"dataset", Kind::String},
    {"data_dir", Kind::String},
    {"test_fraction", Kind::Number, 0, 0.95, true},
    {"partition", Kind::String},
    {"workers", Kind::Integer, 1, 1024},
    {"transport", Kind::String},
    {"ranks_per_node", Kind::Integer, 0, 1024},
    {"link_model", Kind::String},
    {"timeout", Kind::Number, 0, 86400, true},
    {"steps", Kind::Integer, 1, kMaxSteps},
    {"batch_size", Kind::Integer, 1, 1 << 20},
    {"optimizer", Kind::String},
    {"codec", Kind::String},
    {"ef", Kind::String},
    {"algorithm", Kind::String},
    {"inter_algorithm", Kind::String},
    {"lowrank", Kind::String},
    {"bucket_mb", Kind::Number, 0, 4096, true},
    {"min_compress_elements", Kind::Integer, 0, 1ull << 40},
    {"compress_1d", Kind::Boolean},
    {"overlap", Kind::Boolean},
    {"seed", Kind::Integer, 0, 9007199254740992.0},  // 2^53: every seed survives a round trip through JSON tools
    {"eval_every", Kind::Integer, 0, kMaxSteps},
    {"checkpoint_every", Kind::Integer, 0, kMaxSteps},
    {"stop_after", Kind::Integer, 0, kMaxSteps},
    {"model_links", Kind::StringList},
    {"bucket_overrides", Kind::Object},
};

const Key* findKey(const std::string& name) {
  for (const Key& k : kKeys)
    if (name == k.name) return &k;
  return nullptr;
}

std::string rangeText(const Key& k) {
  std::ostringstream o;
  o << std::setprecision(15);
  if (k.kind == Kind::Integer) o << "an integer in [" << k.min << ", " << k.max << "]";
  else o << "a number in " << (k.minExclusive ? "(" : "[") << k.min << ", " << k.max << "]";
  return o.str();
}

[[noreturn]] void badValue(const Key& k, const nlohmann::json& v, const std::string& expected) {
  GRADCOMP_THROW(InvalidArgument, "config key '", k.name, "': ", v.dump(), " is not ", expected);
}

// The value of j[key] as a double after checking its JSON type and range (Integer: also integral).
double checkedNumber(const Key& k, const nlohmann::json& v) {
  if (!v.is_number()) badValue(k, v, rangeText(k));
  double x;
  if (v.is_number_unsigned()) x = static_cast<double>(v.get<uint64_t>());
  else if (v.is_number_integer()) x = static_cast<double>(v.get<int64_t>());
  else x = v.get<double>();
  if (k.kind == Kind::Integer && (!std::isfinite(x) || std::floor(x) != x)) badValue(k, v, rangeText(k));
  const bool aboveMin = k.minExclusive ? x > k.min : x >= k.min;
  if (!std::isfinite(x) || !aboveMin || x > k.max) badValue(k, v, rangeText(k));
  return x;
}

template <typename T>
void read(const nlohmann::json& j, const char* name, T& field) {
  if (!j.contains(name)) return;
  const Key& k = *findKey(name);
  const nlohmann::json& v = j.at(name);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) badValue(k, v, "a string");
    field = v.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) badValue(k, v, "true or false");
    field = v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!v.is_array()) badValue(k, v, "a list of strings");
    field.clear();
    for (const auto& item : v) {
      if (!item.is_string()) badValue(k, v, "a list of strings");
      field.push_back(item.get<std::string>());
    }
  } else if constexpr (std::is_integral_v<T>) {
    field = static_cast<T>(checkedNumber(k, v));  // within [min, max], integral: exact
  } else {
    field = static_cast<T>(checkedNumber(k, v));
  }
}

}  // namespace

bool TrainConfig::isStringKey(const std::string& key) {
  const Key* k = findKey(key);
  return k && k->kind == Kind::String;
}

TrainConfig TrainConfig::fromJson(const nlohmann::json& j) {
  GRADCOMP_CHECK_ARG(j.is_object(), "a training config must be a JSON object {\"key\": value, ...}, got ",
                     j.type_name(), " ", j.dump().substr(0, 60));
  for (const auto& [key, value] : j.items()) {
    std::string known;
    for (const Key& k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k.name);
    GRADCOMP_CHECK_ARG(findKey(key) != nullptr, "unknown config key '", key, "' (known: ", known, ")");
  }
  TrainConfig c;
  read(j, "name", c.name);
  read(j, "model", c.model);
  read(j, "dataset", c.dataset);
  read(j, "data_dir", c.dataDir);
  read(j, "test_fraction", c.testFraction);
  read(j, "partition", c.partition);
  read(j, "workers", c.workers);
  read(j, "transport", c.transport);
  read(j, "ranks_per_node", c.ranksPerNode);
  read(j, "link_model", c.linkModel);
  read(j, "timeout", c.timeoutSeconds);
  read(j, "steps", c.steps);
  read(j, "batch_size", c.batchSize);
  read(j, "optimizer", c.optimizer);
  read(j, "codec", c.codec);
  read(j, "ef", c.errorFeedback);
  read(j, "algorithm", c.algorithm);
  read(j, "inter_algorithm", c.interAlgorithm);
  read(j, "lowrank", c.lowRank);
  read(j, "bucket_mb", c.bucketMB);
  read(j, "min_compress_elements", c.minCompressElements);
  read(j, "compress_1d", c.compressOneDimensional);
  read(j, "overlap", c.overlap);
  read(j, "seed", c.seed);
  read(j, "eval_every", c.evalEvery);
  read(j, "checkpoint_every", c.checkpointEvery);
  read(j, "stop_after", c.stopAfter);
  read(j, "model_links", c.modelLinks);
  if (j.contains("bucket_overrides")) c.bucketOverrides = j.at("bucket_overrides");
  c.validate();
  return c;
}

nlohmann::json TrainConfig::toJson() const {
  nlohmann::json j = {{"name", name},
          {"model", model},
          {"dataset", dataset},
          {"data_dir", dataDir},
          {"test_fraction", testFraction},
          {"partition", partition},
          {"workers", workers},
          {"transport", transport},
          {"ranks_per_node", ranksPerNode},
          {"link_model", linkModel},
          {"timeout", timeoutSeconds},
          {"steps", steps},
          {"batch_size", batchSize},
          {"optimizer", optimizer},
          {"codec", codec},
          {"ef", errorFeedback},
          {"algorithm", algorithm},
          {"inter_algorithm", interAlgorithm},
          {"bucket_mb", bucketMB},
          {"min_compress_elements", minCompressElements},
          {"compress_1d", compressOneDimensional},
          {"overlap", overlap},
          {"seed", seed},
          {"eval_every", evalEvery},
          {"checkpoint_every", checkpointEvery},
          {"stop_after", stopAfter},
          {"model_links", modelLinks},
          {"bucket_overrides", bucketOverrides}};
  // Only when set: the configs (and config_sha256 of stored runs) of every other algorithm stay as they were.
  if (!lowRank.empty()) j["lowrank"] = lowRank;
  return j;
}

void TrainConfig::validate() const {
  // The same ranges as the JSON reader, for configs built in C++ (tests, the Python package).
  GRADCOMP_CHECK_ARG(workers >= 1 && workers <= 1024, "workers must be in 1..1024, got ", workers);
  GRADCOMP_CHECK_ARG(steps >= 1 && static_cast<double>(steps) <= kMaxSteps, "steps must be in [1, 1e12], got ", steps);
  GRADCOMP_CHECK_ARG(batchSize >= 1 && batchSize <= (1u << 20), "batch_size must be in [1, 1048576], got ", batchSize);
  GRADCOMP_CHECK_ARG(bucketMB > 0 && bucketMB <= 4096, "bucket_mb must be in (0, 4096], got ", bucketMB);
  GRADCOMP_CHECK_ARG(timeoutSeconds > 0 && timeoutSeconds <= 86400, "timeout must be in (0, 86400] seconds, got ",
                     timeoutSeconds);
  GRADCOMP_CHECK_ARG(testFraction > 0 && testFraction <= 0.95, "test_fraction must be in (0, 0.95], got ", testFraction);
  for (const uint64_t* v : {&evalEvery, &checkpointEvery, &stopAfter})
    GRADCOMP_CHECK_ARG(static_cast<double>(*v) <= kMaxSteps, "eval_every, checkpoint_every and stop_after must be "
                       "in [0, 1e12], got ", *v);
  GRADCOMP_CHECK_ARG(transport == "auto" || transport == "inproc" || transport == "mpi", "transport '", transport,
                     "' is not auto, inproc or mpi");
  GRADCOMP_CHECK_ARG(partition == "iid" || partition == "noniid", "partition '", partition, "' is not iid or noniid");
  GRADCOMP_CHECK_ARG(ranksPerNode >= 0 && ranksPerNode <= 1024, "ranks_per_node must be in [0, 1024], got ",
                     ranksPerNode);
  GRADCOMP_CHECK_ARG(bucketOverrides.is_object(), "bucket_overrides must be an object keyed by bucket index");
  for (const auto& [key, value] : bucketOverrides.items()) {
    GRADCOMP_CHECK_ARG(!key.empty() && key.find_first_not_of("0123456789") == std::string::npos,
                       "bucket_overrides key '", key, "' is not a bucket index");
    GRADCOMP_CHECK_ARG(value.is_object(), "bucket_overrides['", key, "'] must be an object");
    for (const auto& [field, v] : value.items())
      GRADCOMP_CHECK_ARG((field == "codec" || field == "ef" || field == "algorithm") && v.is_string(),
                         "bucket_overrides['", key, "']: '", field, "' is not codec, ef or algorithm (a string)");
  }
  GRADCOMP_CHECK_ARG(!name.empty() && name.find('/') == std::string::npos, "run name '", name,
                     "' must be non-empty and without '/'");
}

void applyOverride(nlohmann::json& config, const std::string& assignment) {
  GRADCOMP_CHECK_ARG(config.is_object(), "--set ", assignment, ": the config is not a JSON object");
  const auto eq = assignment.find('=');
  GRADCOMP_CHECK_ARG(eq != std::string::npos && eq > 0, "--set expects key=value, got '", assignment, "'");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  nlohmann::json value;
  if (TrainConfig::isStringKey(key) && !(text.size() >= 2 && text.front() == '"')) {
    value = text;  // name=123 is the string "123", codec=topk:ratio=0.01 a spec
  } else {
    try {
      value = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      value = text;  // a bare string for a key that wants another type: the reader names the key
    }
  }
  config[key] = value;
}

}  // namespace gradcomp
