#include "tandem/dist/launch.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "tandem/core/error.h"

namespace tandem::dist {

namespace {

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value) return std::nullopt;
  return std::string(value);
}

int64_t parse_count(const std::string& name, const std::string& value) {
  size_t used = 0;
  int64_t parsed = -1;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == value.size() && !value.empty() && parsed >= 0, "[dist] ", name, "='", value,
        "' is not a non-negative integer");
  return parsed;
}

}  // namespace

LaunchEnv read_launch_env(
    const std::function<std::optional<std::string>(const std::string&)>& getenv_in) {
  const auto getenv = getenv_in ? getenv_in : process_env;
  const auto count = [&](const std::string& name) -> std::optional<int64_t> {
    const std::optional<std::string> value = getenv(name);
    if (!value) return std::nullopt;
    return parse_count(name, *value);
  };
  LaunchEnv env;
  std::string rank_var, world_var;
  if (getenv("RANK") || getenv("WORLD_SIZE")) {
    env.launcher = "torchrun";
    rank_var = "RANK";
    world_var = "WORLD_SIZE";
    check(getenv("RANK") && getenv("WORLD_SIZE"), "[dist] RANK and WORLD_SIZE must be set together",
          " (torchrun sets both)");
    env.rank = *count("RANK");
    env.world_size = *count("WORLD_SIZE");
    env.local_rank = count("LOCAL_RANK").value_or(env.rank);
    env.local_world_size = count("LOCAL_WORLD_SIZE").value_or(env.world_size);
    env.agent_hosts_store = getenv("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  } else if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) {
    env.launcher = "slurm";
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    env.rank = *count("SLURM_PROCID");
    env.world_size = *count("SLURM_NTASKS");
    env.local_rank = count("SLURM_LOCALID").value_or(0);
    // SLURM_NTASKS_PER_NODE may read "2" or "2(x3)": the leading count is this node's.
    if (const auto per_node = getenv("SLURM_NTASKS_PER_NODE")) {
      const std::string leading = per_node->substr(0, per_node->find('('));
      env.local_world_size = parse_count("SLURM_NTASKS_PER_NODE", leading);
    } else {
      env.local_world_size = env.world_size;
    }
  } else {
    return env;  // a single process
  }
  check(env.world_size >= 1, "[dist] ", world_var, " must be at least 1");
  check(env.rank < env.world_size, "[dist] ", rank_var, "=", env.rank, " is not below ", world_var,
        "=", env.world_size);
  check(env.local_world_size >= 1 && env.local_rank < env.local_world_size, "[dist] local rank ",
        env.local_rank, " is not below the ", env.local_world_size, " processes on this machine");
  // Read whenever set, a world of one included: its group still binds a rendezvous store there
  // (a group of one connects when distributed.backend names one, e.g. NCCL on one GPU).
  const std::optional<std::string> addr = getenv("MASTER_ADDR");
  const std::optional<std::string> port = getenv("MASTER_PORT");
  if (env.world_size > 1) {
    check(addr && !addr->empty(), "[dist] MASTER_ADDR is not set: ", env.world_size,
          " processes need the address of rank 0's host",
          env.launcher == "slurm" ? " (export it in the batch script, e.g. the first host of "
                                    "$SLURM_JOB_NODELIST)"
                                  : "");
    check(port.has_value(), "[dist] MASTER_PORT is not set: ", env.world_size,
          " processes need a free TCP port on ", *addr, " for the rendezvous store");
  }
  if (addr && !addr->empty()) env.master_addr = *addr;
  if (port) {
    const int64_t port_number = parse_count("MASTER_PORT", *port);
    check(port_number >= 1 && port_number <= 65535, "[dist] MASTER_PORT=", *port,
          " is not a TCP port (1..65535)");
    env.port = static_cast<int>(port_number);
  }
  return env;
}

void exit_with_launcher(const LaunchEnv& launch) {
  if (launch.launcher == "none") return;
  check(::prctl(PR_SET_PDEATHSIG, SIGTERM) == 0, "[launch] cannot ask for a signal when the ",
        launch.launcher, " launcher exits (prctl PR_SET_PDEATHSIG)");
  if (::getppid() == 1) std::raise(SIGTERM);  // it died before the request: orphaned already
}

}  // namespace tandem::dist
