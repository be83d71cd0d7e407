#pragma once
// Tests that need several real processes: forks `ranks` children that each run `body(rank,
// port)` (the port is free on 127.0.0.1 for a c10d store) and exit with its failure count.
// The parent waits at most `limit`; a hung child is killed and fails the test.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "tandem/dist/process_group.h"

namespace tandem::testing {

inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

/// body(rank, port) -> number of failed checks (an exception counts 100).
inline void run_forked_ranks(int ranks, const std::function<int(int64_t, int)>& body,
                             std::chrono::seconds limit = std::chrono::seconds(60)) {
  const int port = free_port();
  std::vector<pid_t> children;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid > 0) {
      children.push_back(pid);
      continue;
    }
    int failures = 0;
    try {
      failures = body(rank, port);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "rank %ld: %s\n", static_cast<long>(rank), error.what());
      failures = 100;
    }
    _exit(failures > 255 ? 255 : failures);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "a rank hung";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank exit status " << WEXITSTATUS(status) << " (failed checks; 100+: an error)";
  }
}

/// Rank `rank` of `world` joining a Gloo group over 127.0.0.1:`port` (20 s timeout).
inline std::shared_ptr<dist::ProcessGroup> connect_loopback(int64_t rank, int64_t world, int port) {
  dist::LaunchEnv env;
  env.rank = rank;
  env.world_size = world;
  env.master_addr = "127.0.0.1";
  env.port = port;
  return dist::ProcessGroup::connect(env, dist::Backend::Gloo, std::chrono::seconds(20));
}

}  // namespace tandem::testing
