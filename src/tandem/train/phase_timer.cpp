#include "tandem/train/phase_timer.h"

#include <ATen/DeviceAccelerator.h>

#include "tandem/core/error.h"

namespace tandem {

namespace {

// An event that keeps timing (BACKEND_DEFAULT; PyTorch's default turns timing off), recorded on
// the device's current stream now.
c10::Event record_now(const c10::Device& device) {
  c10::Event event(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  event.record(at::accelerator::getCurrentStream(device.index()));
  return event;
}

}  // namespace

PhaseTimer::PhaseTimer(c10::Device device) : device_(device) {}

void PhaseTimer::begin() {
  if (device_.is_cuda()) {
    open_.clear();
    open_.push_back(record_now(device_));
  } else {
    host_start_ = std::chrono::steady_clock::now();
  }
}

void PhaseTimer::end(const std::string& phase) {
  if (!device_.is_cuda()) {
    host_seconds_[phase] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
    return;
  }
  check(!open_.empty(), "[train] phase timer: '", phase, "' ended without a begin");
  spans_.push_back({phase, std::move(open_.back()), record_now(device_)});
  open_.clear();
}

std::map<std::string, double> PhaseTimer::take() {
  std::map<std::string, double> seconds = std::move(host_seconds_);
  host_seconds_.clear();
  for (Span& span : spans_) {
    span.end.synchronize();
    seconds[span.phase] += span.start.elapsedTime(span.end) / 1000.0;  // ms
  }
  spans_.clear();
  return seconds;
}

}  // namespace tandem
