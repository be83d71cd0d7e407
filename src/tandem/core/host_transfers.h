#pragma once
// Counts of the copies between the host and the device that go through tandem's two doors:
// to_device (host -> device: batches, indices; core/device.h) and read_on_host (device -> host:
// the reviewed reads of core/host_read.h). Host tensors handed to to_device are counted on every
// device, the CPU included, so a run on the CPU shows what a GPU run of the same step copies.
#include <cstdint>

namespace tandem {

struct HostTransfers {
  int64_t to_device_calls = 0, to_device_bytes = 0;  // host tensors handed to to_device
  int64_t to_host_calls = 0, to_host_bytes = 0;      // tensors read through read_on_host
};

/// Totals since the process started (take the difference around a piece of work).
HostTransfers host_transfers();

namespace detail {
void count_to_device(int64_t bytes);
void count_to_host(int64_t bytes);
}  // namespace detail

}  // namespace tandem
