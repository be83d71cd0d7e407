// The launch environment (dist/launch.h): torchrun's and Slurm's variables, a single process
// when neither is set, and an error naming the variable for each malformed or inconsistent one.
// The process group's collectives (dist/process_group.h) between 2 forked processes over
// 127.0.0.1 with Gloo, against hand-computed values.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "forked_ranks.h"
#include "tandem/dist/launch.h"
#include "tandem/dist/process_group.h"
#include "test_util.h"

namespace {

using tandem::dist::LaunchEnv;
using tandem::testing::error_of;

LaunchEnv read(const std::map<std::string, std::string>& vars) {
  return tandem::dist::read_launch_env([&](const std::string& name) -> std::optional<std::string> {
    auto found = vars.find(name);
    if (found == vars.end()) return std::nullopt;
    return found->second;
  });
}

std::string error_for(const std::map<std::string, std::string>& vars) {
  return error_of([&] { read(vars); });
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const LaunchEnv env = read({});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.launcher, "none");
}

TEST(LaunchEnv, TorchrunVariables) {
  const LaunchEnv env = read({{"RANK", "3"},
                              {"WORLD_SIZE", "4"},
                              {"LOCAL_RANK", "1"},
                              {"LOCAL_WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "10.0.0.7"},
                              {"MASTER_PORT", "29511"},
                              {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.port, 29511);
  EXPECT_TRUE(env.agent_hosts_store);  // rank 0 then connects to torchrun's store as a client
}

// A world of one still binds its rendezvous store when it connects a backend (NCCL on one
// GPU): the port and address it was given are used, not the defaults.
TEST(LaunchEnv, AWorldOfOneHonoursMasterAddrAndPort) {
  const LaunchEnv env = read(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.2"}, {"MASTER_PORT", "41234"}});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.2");
  EXPECT_EQ(env.port, 41234);
  // Unset, they keep their defaults (nothing to agree on with other processes).
  const LaunchEnv bare = read({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(bare.master_addr, "127.0.0.1");
  EXPECT_EQ(bare.port, 29500);
  EXPECT_NE(error_for({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "0"}})
                .find("MASTER_PORT=0 is not a TCP port"),
            std::string::npos);
  EXPECT_EQ(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"MASTER_PORT", "41235"}}).port,
            41235);
}

TEST(LaunchEnv, SlurmVariables) {
  const LaunchEnv env = read({{"SLURM_PROCID", "5"},
                              {"SLURM_NTASKS", "8"},
                              {"SLURM_LOCALID", "1"},
                              {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                              {"MASTER_ADDR", "node1"},
                              {"MASTER_PORT", "12345"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_FALSE(env.agent_hosts_store);
  // A one-task srun needs no rendezvous.
  EXPECT_EQ(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).world_size, 1);
}

TEST(LaunchEnv, EachBadVariableIsNamed) {
  const std::map<std::string, std::string> good = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& name, const std::string& value) {
    auto vars = good;
    vars[name] = value;
    return error_for(vars);
  };
  auto without = [&](const std::string& name) {
    auto vars = good;
    vars.erase(name);
    return error_for(vars);
  };
  EXPECT_NE(with("RANK", "2").find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(with("RANK", "one").find("RANK='one' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE must be at least 1"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT=70000 is not a TCP port"),
            std::string::npos);
  EXPECT_NE(without("MASTER_ADDR").find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_NE(without("MASTER_PORT").find("MASTER_PORT is not set"), std::string::npos);
  EXPECT_NE(without("WORLD_SIZE").find("RANK and WORLD_SIZE must be set together"),
            std::string::npos);
  EXPECT_NE(
      error_for({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}).find("MASTER_ADDR is not set"),
      std::string::npos);
}

TEST(ProcessGroup, OneProcessCollectivesAreLocal) {
  auto group = tandem::dist::ProcessGroup::single();
  at::Tensor tensor = at::arange(6, at::kFloat);
  group->all_reduce_sum(tensor);
  EXPECT_TRUE(tensor.equal(at::arange(6, at::kFloat)));
  EXPECT_TRUE(group->reduce_scatter_sum(tensor).equal(tensor));
  EXPECT_TRUE(group->all_gather(tensor).equal(tensor));
  std::string text = "kept";
  group->broadcast_text(text);
  EXPECT_EQ(text, "kept");
  EXPECT_EQ(group->all_reduce_int64(7), 7);
  EXPECT_EQ(group->bytes().all_reduce, 24 + 8);
  EXPECT_EQ(tandem::dist::choose_backend("auto", false), tandem::dist::Backend::Gloo);
  EXPECT_NE(error_of([] { tandem::dist::choose_backend("mpi", false); }).find("not one of"),
            std::string::npos);
}

TEST(ProcessGroup, TwoProcessesOverLoopbackGiveHandComputedResults) {
  tandem::testing::run_forked_ranks(2, [](int64_t rank, int port) {
    int failures = 0;
    auto group = tandem::testing::connect_loopback(rank, 2, port);
    const double r = static_cast<double>(rank);
    at::Tensor summed = at::full({3}, r + 1.0);  // 1 + 2
    group->all_reduce_sum(summed);
    failures += !summed.equal(at::full({3}, 3.0));
    at::Tensor sent = at::arange(4, at::kFloat) + 10 * r;  // rank 1's arrives everywhere
    group->broadcast(sent, 1);
    failures += !sent.equal(at::arange(4, at::kFloat) + 10);
    const at::Tensor gathered = group->all_gather(at::full({2}, r));  // [0 0 1 1]
    failures += !gathered.equal(at::tensor({0.0f, 0.0f, 1.0f, 1.0f}));
    const at::Tensor full = at::arange(4, at::kFloat) * (r + 1);  // sum = 3 * [0 1 2 3]
    const at::Tensor native = group->reduce_scatter_sum(full);
    const at::Tensor emulated = group->reduce_scatter_sum(full, /*emulate=*/true);
    const at::Tensor expected = at::arange(4, at::kFloat).narrow(0, 2 * rank, 2) * 3;
    failures += !native.equal(expected);
    failures += !emulated.equal(expected);
    std::string text = rank == 0 ? "from rank 0" : "";
    group->broadcast_text(text, 0);
    failures += text != "from rank 0";
    failures += group->all_reduce_int64(rank + 5) != 11;
    group->barrier();
    return failures;
  });
}

}  // namespace
