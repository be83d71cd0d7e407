#include "tandem/io/export_dir.h"

#include <filesystem>

#include "tandem/core/file_io.h"
#include "tandem/io/hf_checkpoint.h"

namespace tandem {

void publish_export_dir(const std::string& dir,
                        const std::function<void(const std::string& staging)>& fill) {
  const std::filesystem::path destination(dir);
  if (destination.has_parent_path()) std::filesystem::create_directories(destination.parent_path());
  const std::string staging = dir + ".tmp";
  std::filesystem::remove_all(staging);
  std::filesystem::create_directories(staging);
  fill(staging);
  const std::string old = dir + ".old";
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
  std::filesystem::rename(staging, dir);
  std::filesystem::remove_all(old);
}

void write_export_dir(const std::string& dir, const nlohmann::json& config,
                      const std::vector<std::pair<std::string, at::Tensor>>& weights) {
  publish_export_dir(dir, [&](const std::string& staging) {
    write_hf_weights(staging, weights);
    replace_file(staging + "/config.json", config.dump(2) + "\n", "[export]");
  });
}

}  // namespace tandem
