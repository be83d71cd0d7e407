// Compiled with USE_C10D_GLOO (CMakeLists.txt): ProcessGroupGloo.hpp declares its class only
// then. libtorch_cpu carries the implementation; the headers of the gloo library it includes come
// from Debian's libgloo-dev, whose API for what this file touches (device creation, options)
// matches the version libtorch was built with.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "tandem/dist/backends.h"

namespace tandem::dist {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& host) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                          : c10d::ProcessGroupGloo::createDeviceForHostname(host));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

}  // namespace tandem::dist
