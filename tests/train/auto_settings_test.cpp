// choose_settings (Note [Chosen settings]): what the program picks for each kind of run, that a
// key the user gave is never changed, and that every choice comes with its reason.
#include <gtest/gtest.h>

#include <map>

#include "train/auto_settings.h"

namespace vitddp {
namespace {

RunFacts two_gpus(bool peer_access) {
  RunFacts f;
  f.gpu = true;
  f.world_size = 2;
  f.single_host = true;
  f.peer_access = peer_access;
  f.no_peer_access_why = peer_access ? "" : "NCCL_P2P_DISABLE=1";
  f.cpus_per_rank = 16;
  return f;
}

std::map<std::string, std::string> chosen(const RunFacts& facts, TrainConfig* c) {
  std::map<std::string, std::string> out;
  for (const ChosenSetting& s : choose_settings(facts, c)) {
    EXPECT_FALSE(s.reason.empty()) << s.key;
    out[s.key] = s.value;
  }
  return out;
}

TEST(ChosenSettings, OneGpuReplaysItsStepsAsAGraph) {
  RunFacts f;
  f.gpu = true;
  f.cpus_per_rank = 16;
  TrainConfig c;
  const auto picked = chosen(f, &c);
  EXPECT_TRUE(c.cuda_graph);
  EXPECT_EQ(c.workers, 8);
  EXPECT_EQ(c.transport, "nccl");
  EXPECT_EQ(c.update, "after-backward");
  EXPECT_EQ(picked.count("cuda-graph"), 0u);  // on by default: nothing to say
  // With PowerSGD the capture waits for the first compressed step; the timing starts after it.
  c = TrainConfig();
  c.hook = "powersgd";
  c.ddp = true;
  c.powersgd_start_iter = 6;
  chosen(f, &c);
  EXPECT_EQ(c.untimed_steps, 8);
}

TEST(ChosenSettings, TheCpuRunsEagerlyWithALoaderThreadPerCpu) {
  RunFacts f;
  f.cpus_per_rank = 2;
  TrainConfig c;
  const auto picked = chosen(f, &c);
  EXPECT_FALSE(c.cuda_graph);
  EXPECT_EQ(picked.count("cuda-graph"), 0u);  // nothing to say on a CPU
  EXPECT_EQ(c.workers, 2);
}

TEST(ChosenSettings, TwoGpusWithoutPeerAccessTakeTheHostCopy) {
  TrainConfig c;
  c.precision = "bf16";
  c.hook = "bf16";
  const auto picked = chosen(two_gpus(false), &c);
  EXPECT_EQ(c.transport, "host-copy");
  EXPECT_EQ(c.update, "next-forward");
  EXPECT_EQ(c.bucket_mb, 50.0);
  EXPECT_EQ(c.first_bucket_mb, 10.0);
  EXPECT_EQ(c.ready_order_share, 0.3);
  EXPECT_EQ(c.held_buckets, 1);
  EXPECT_FALSE(c.cuda_graph);
  EXPECT_EQ(picked.at("transport"), "host-copy");
  // fp32: the host copy alone, eagerly.
  TrainConfig fp32;
  chosen(two_gpus(false), &fp32);
  EXPECT_EQ(fp32.transport, "host-copy");
  EXPECT_EQ(fp32.update, "after-backward");
  EXPECT_EQ(fp32.bucket_mb, 25.0);
  EXPECT_FALSE(fp32.cuda_graph);
  // PowerSGD keeps NCCL and the graph; its buckets are the user's (their layout changes the bits).
  TrainConfig psgd;
  psgd.hook = "powersgd";
  psgd.precision = "bf16";
  chosen(two_gpus(false), &psgd);
  EXPECT_EQ(psgd.transport, "nccl");
  EXPECT_EQ(psgd.update, "after-backward");
  EXPECT_EQ(psgd.bucket_mb, 25.0);
  EXPECT_TRUE(psgd.cuda_graph);
}

TEST(ChosenSettings, TwoGpusWithPeerAccessShardTheirBf16Updates) {
  TrainConfig c;
  c.precision = "bf16";
  chosen(two_gpus(true), &c);
  EXPECT_EQ(c.transport, "nccl");
  EXPECT_EQ(c.update, "sharded");
  EXPECT_EQ(c.bucket_mb, 100.0);
  EXPECT_EQ(c.tail_bucket_mb, 25.0);
  EXPECT_TRUE(c.cuda_graph);
  // AdamW would turn the graph off under sharded updates: plain updates, graphed.
  TrainConfig adamw;
  adamw.precision = "bf16";
  adamw.optimizer = "adamw";
  chosen(two_gpus(true), &adamw);
  EXPECT_EQ(adamw.update, "after-backward");
  EXPECT_TRUE(adamw.cuda_graph);
}

TEST(ChosenSettings, WhatTheUserGaveIsKept) {
  TrainConfig c;
  c.precision = "bf16";
  c.hook = "bf16";
  c.bucket_mb = 25;
  c.transport = "nccl";
  c.given = {"bucket-mb", "transport"};
  const auto picked = chosen(two_gpus(false), &c);
  EXPECT_EQ(c.transport, "nccl");
  EXPECT_EQ(c.bucket_mb, 25.0);
  EXPECT_EQ(picked.count("transport"), 0u);
  EXPECT_EQ(c.update, "next-forward");  // still chosen, with NCCL's share
  EXPECT_EQ(c.ready_order_share, 0.35);
  // An update the user placed keeps the transport NCCL's where the host copy cannot carry it.
  TrainConfig sharded;
  sharded.precision = "bf16";
  sharded.update = "sharded";
  sharded.given = {"update"};
  chosen(two_gpus(false), &sharded);
  EXPECT_EQ(sharded.transport, "nccl");
  // --nonfinite skip needs every gradient scanned before any update: the plain placement.
  TrainConfig skip;
  skip.precision = "bf16";
  skip.nonfinite = "skip";
  chosen(two_gpus(true), &skip);
  EXPECT_EQ(skip.update, "after-backward");
}

TEST(ChosenSettings, RecipesAreTakenOnlyWhereTheyWereMeasured) {
  for (int world : {3, 4, 8}) {
    RunFacts f = two_gpus(false);
    f.world_size = world;
    TrainConfig c;
    c.precision = "bf16";
    chosen(f, &c);
    EXPECT_EQ(c.transport, "nccl") << world;
    EXPECT_EQ(c.update, "after-backward") << world;
  }
  RunFacts two_hosts = two_gpus(false);
  two_hosts.single_host = false;
  TrainConfig c;
  chosen(two_hosts, &c);
  EXPECT_EQ(c.transport, "nccl");
}

// A clipped run needs every bucket reduced before any update: no overlapped placement is chosen.
TEST(ChosenSettings, AClippedRunKeepsThePlainUpdate) {
  for (bool peer_access : {false, true}) {
    TrainConfig c;
    c.precision = "bf16";
    c.clip_grad_norm = 1.0;
    chosen(two_gpus(peer_access), &c);
    EXPECT_EQ(c.update, "after-backward") << peer_access;
  }
}

TEST(ChosenSettings, DescribeNamesEachChoiceAndItsReason) {
  const std::string text = describe_choices({{"transport", "host-copy", "no peer access"}, {"workers", "8", "16 CPUs"}});
  EXPECT_EQ(text, "chosen: transport host-copy (no peer access)\nchosen: workers 8 (16 CPUs)\n");
}

}  // namespace
}  // namespace vitddp
