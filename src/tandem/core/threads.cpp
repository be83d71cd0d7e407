#include "tandem/core/threads.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tandem/core/error.h"

namespace tandem {

namespace {
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}
}  // namespace

int configure_threads(int requested) {
  int threads = requested;
  if (threads <= 0) {
    if (const char* env = std::getenv("TANDEM_THREADS"); env && *env) {
      try {
        threads = std::stoi(env);
      } catch (const std::exception&) {
        throw Error("[threads] TANDEM_THREADS='", env, "' is not an integer");
      }
      check(threads > 0, "[threads] TANDEM_THREADS must be positive, got ", threads);
    } else {
      // Processes launched side by side on this machine (torchrun's LOCAL_WORLD_SIZE) share
      // its cores instead of each taking all of them.
      int local_processes = 1;
      if (const char* local = std::getenv("LOCAL_WORLD_SIZE"); local && *local) {
        try {
          local_processes = std::max(1, std::stoi(local));
        } catch (const std::exception&) {
          throw Error("[threads] LOCAL_WORLD_SIZE='", local, "' is not an integer");
        }
      }
      threads = std::max(1, usable_cores() / local_processes);
    }
  }
  static bool interop_set = false;  // libtorch allows setting it once per process
  if (!interop_set) {
    at::set_num_interop_threads(1);
    interop_set = true;
  }
  at::set_num_threads(threads);
  return threads;
}

}  // namespace tandem
