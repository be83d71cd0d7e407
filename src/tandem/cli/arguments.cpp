#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/dist/launch.h"

namespace tandem::cli {

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used > 0 && used == item.size(), "[cli] ", what, ": '", item,
          "' is not an integer (expected a comma-separated list like 1,2,3)");
    out.push_back(value);
  }
  check(!out.empty(), "[cli] ", what, ": empty list");
  return out;
}

void add_chat_template_options(CLI::App& command, std::string& chat_template,
                               std::string& template_kwargs, const std::string& note) {
  command.add_option("--chat-template", chat_template,
                     "auto (the tokenizer's own Jinja template, the default), a .jinja file, or "
                     "llama3, chatml (Qwen2.5), qwen2, chatml-plain");
  command.add_option("--template-kwargs", template_kwargs,
                     "extra Jinja template variables, a JSON object: '{\"enable_thinking\": "
                     "false}'" +
                         note);
}

void add_device_option(CLI::App& command, std::string& device) {
  command
      .add_option("--device", device,
                  "auto | cpu | cuda | cuda:N (auto: a GPU when one is visible, else the CPU)")
      ->capture_default_str();
}

c10::Device device_from_option(const std::string& device) {
  const c10::Device resolved =
      resolve_device(device, dist::read_launch_env().local_rank, "--device");
  make_current(resolved);
  return resolved;
}

}  // namespace tandem::cli
