#pragma once
// Where this process sits in a multi-process job, read from the environment the launcher set:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or Slurm's
// srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, with MASTER_ADDR and
// MASTER_PORT exported by the batch script). Neither: a single process.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tandem::dist {

struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;  // processes sharing this machine (they share its cores)
  std::string master_addr = "127.0.0.1";
  int port = 29500;
  // torchrun's agent hosts the rendezvous store itself (TORCHELASTIC_USE_AGENT_STORE=True):
  // then every rank connects to it as a client, rank 0 included.
  bool agent_hosts_store = false;
  std::string launcher = "none";  // "torchrun" | "slurm" | "none"
};

/// Reads the launch environment through `getenv` (the process's own by default). Throws an
/// Error naming the variable when one is malformed or they disagree (rank >= world size,
/// MASTER_ADDR/MASTER_PORT missing for a multi-process job, a port outside 1..65535).
/// MASTER_ADDR and MASTER_PORT are used whenever they are set, by a world of one too.
LaunchEnv read_launch_env(
    const std::function<std::optional<std::string>(const std::string&)>& getenv = {});

/// A rank started by a launcher (torchrun, srun) asks the kernel for SIGTERM when the launcher
/// dies (PR_SET_PDEATHSIG), and raises it at once if the launcher is already gone: an orphaned
/// rank then finishes its step, saves and exits like a preempted one, instead of training on
/// beside a restarted job. No-op for a process started without a launcher.
void exit_with_launcher(const LaunchEnv& launch);

}  // namespace tandem::dist
