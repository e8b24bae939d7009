#include "training/train_config.h"

#include "core/error.h"

namespace gradcomp {

namespace {

// Reads j[key] into `field` if present, naming the key when the type is wrong.
template <typename T>
void read(const nlohmann::json& j, const char* key, T& field) {
  if (!j.contains(key)) return;
  try {
    field = j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    GRADCOMP_THROW(InvalidArgument, "config key '", key, "': ", j.at(key).dump(), " has the wrong type (", e.what(), ")");
  }
}

const char* const kKeys[] = {"name", "model", "dataset", "data_dir", "test_fraction", "partition", "workers",
                             "transport", "ranks_per_node", "link_model", "timeout", "steps", "batch_size",
                             "optimizer", "codec", "ef", "algorithm", "inter_algorithm", "bucket_mb",
                             "min_compress_elements", "compress_1d", "overlap", "seed", "eval_every",
                             "checkpoint_every", "stop_after", "model_links", "bucket_overrides"};

}  // namespace

TrainConfig TrainConfig::fromJson(const nlohmann::json& j) {
  GRADCOMP_CHECK_ARG(j.is_object(), "a training config must be a JSON object, got ", j.dump());
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    GRADCOMP_CHECK_ARG(known, "unknown config key '", key, "'");
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
  return {{"name", name},
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
}

void TrainConfig::validate() const {
  GRADCOMP_CHECK_ARG(workers >= 1 && workers <= 1024, "workers must be in 1..1024, got ", workers);
  GRADCOMP_CHECK_ARG(steps >= 1, "steps must be at least 1");
  GRADCOMP_CHECK_ARG(batchSize >= 1, "batch_size must be at least 1");
  GRADCOMP_CHECK_ARG(bucketMB > 0 && bucketMB <= 4096, "bucket_mb must be in (0, 4096], got ", bucketMB);
  GRADCOMP_CHECK_ARG(timeoutSeconds > 0, "timeout must be positive, got ", timeoutSeconds);
  GRADCOMP_CHECK_ARG(transport == "auto" || transport == "inproc" || transport == "mpi", "transport '", transport,
                     "' is not auto, inproc or mpi");
  GRADCOMP_CHECK_ARG(partition == "iid" || partition == "noniid", "partition '", partition, "' is not iid or noniid");
  GRADCOMP_CHECK_ARG(ranksPerNode >= 0, "ranks_per_node must be >= 0");
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
  const auto eq = assignment.find('=');
  GRADCOMP_CHECK_ARG(eq != std::string::npos && eq > 0, "--set expects key=value, got '", assignment, "'");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    value = text;  // a bare string: codec=topk:ratio=0.01
  }
  config[key] = value;
}

}  // namespace gradcomp
