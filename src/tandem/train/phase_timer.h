#pragma once
// Wall time of the phases of a training step (forward, backward, optimizer), measured without
// making the host wait: on the CPU with the host clock; on a GPU with events recorded on the
// device's stream at each phase boundary and read at the end of the step, after the step's one
// read of its metrics has waited for the device anyway.
#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace tandem {

class PhaseTimer {
 public:
  explicit PhaseTimer(c10::Device device);
  /// A phase starts now.
  void begin();
  /// The phase begun last ends now; its time is added to `phase`.
  void end(const std::string& phase);
  /// Seconds per phase since the last take(), and starts afresh. On a GPU this waits for the
  /// recorded events (call it once the step's work has been waited for).
  std::map<std::string, double> take();

 private:
  c10::Device device_;
  std::chrono::steady_clock::time_point host_start_;
  std::map<std::string, double> host_seconds_;
  struct Span {
    std::string phase;
    c10::Event start, end;
  };
  std::vector<Span> spans_;       // GPU: one per ended phase
  std::vector<c10::Event> open_;  // GPU: the event of the phase begun last
};

}  // namespace tandem
