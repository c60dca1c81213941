// docs/fsdp.md: resharding checkpoints (collective: every rank calls it).
#include <cstdint>

#include <mlframework/mlframework.hpp>

using namespace mlframework;
using distributed::fsdp::BlobState;
using distributed::fsdp::FSDP;

// adam: built over fsdp.ShardedParameters()
std::int64_t SaveAndResume(FSDP& fsdp, optimizers::Adam& adam, amp::GradScaler& scaler) {
  fsdp.SaveShardedCheckpointFiles("ckpt/step-1000",  // here at 4 ranks, say
                                  {.Optimizer = &adam, .Scaler = BlobState::Of(scaler), .Step = 1000});
  // later, at 3 ranks, after registering the same units and building adam over ShardedParameters():
  return fsdp.LoadShardedCheckpointFiles("ckpt/step-1000", {.Optimizer = &adam, .Scaler = BlobState::Of(scaler)});
}
