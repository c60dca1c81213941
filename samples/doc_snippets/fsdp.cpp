// docs/fsdp.md: gradient wire formats; resharding checkpoints (collectives: every rank calls them).
#include <cstdint>
#include <memory>

#include <mlframework/mlframework.hpp>

using namespace mlframework;
using distributed::fsdp::BlobState;
using distributed::fsdp::FSDP;
using distributed::fsdp::GradientWire;
using distributed::fsdp::ShardingStrategy;
using distributed::fsdp::UnitPrecision;

// adam: built over fsdp.ShardedParameters()
std::int64_t SaveAndResume(FSDP& fsdp, optimizers::Adam& adam, amp::GradScaler& scaler) {
  fsdp.SaveShardedCheckpointFiles("ckpt/step-1000",  // here at 4 ranks, say
                                  {.Optimizer = &adam, .Scaler = BlobState::Of(scaler), .Step = 1000});
  // later, at 3 ranks, after registering the same units and building adam over ShardedParameters():
  return fsdp.LoadShardedCheckpointFiles("ckpt/step-1000", {.Optimizer = &adam, .Scaler = BlobState::Of(scaler)});
}

// world: the job's process group; params: one unit's parameters by name
void ReduceOverTheFloat8Wire(const std::shared_ptr<distributed::IProcessGroup>& world, const GradientMap& params) {
  FSDP fsdp(world, {.Strategy = ShardingStrategy::FullShard, .Wire = GradientWire::Float8Blocks});
  UnitPrecision exact;
  exact.Wire = GradientWire::ReduceDType;  // this unit's gradients travel in the reduce dtype
  fsdp.RegisterUnit("ln_f", params, exact);
}

// world: the job's process group; params: the unit's parameters by name
void AccumulateSharded(const std::shared_ptr<distributed::IProcessGroup>& world, const GradientMap& params) {
  FSDP fsdp(world, {.Strategy = ShardingStrategy::FullShard, .ShardedAccumulation = true});
  fsdp.RegisterUnit("block0", params);
  fsdp.SetRequiresGradientSync(false);  // micro-batches: each reduced into the FP32 shard
}
