#pragma once
// Private: the process groups an FSDP's units communicate in. Every strategy but HybridShard
// shards over the whole group; HybridShard shards over a shard group (a node) and replicates
// across a replicate group, split from the whole group (IProcessGroup::Split).

#include <memory>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>

namespace mlframework::distributed::fsdp::detail {

// ArgumentError naming `ShardGroupSize`: HybridShard needs a size >= 1, the other strategies 0.
void ValidateShardGroupSize(ShardingStrategy strategy, int shard_group_size);

struct ShardingGroups {
  std::shared_ptr<IProcessGroup> shard;      // gathers and reduce-scatters (the whole group unless HybridShard)
  std::shared_ptr<IProcessGroup> replicate;  // HybridShard: all-reduces gradient shards across replicas; else null
};

// Validates @p config and returns its groups over @p world. Local for every strategy but
// HybridShard; under HybridShard a collective over @p world: the config's checks, the shard
// group size dividing the world size and every rank using the same size are agreed, so all
// ranks throw ArgumentError together, before the two splits.
ShardingGroups MakeShardingGroups(const std::shared_ptr<IProcessGroup>& world, const FSDPConfig& config);

// The square sum of the whole gradient, the same value on every rank, from this rank's
// @p local_sum: shards are summed over the shard group, each shard counted once (replicas hold
// equal shards, so a MAX across the replicate group picks one exactly); NoShard, where every
// rank holds the whole gradient, agrees with a MAX over the world.
double AgreedSquareSum(IProcessGroup& world, const ShardingGroups& groups, ShardingStrategy strategy, double local_sum);

}  // namespace mlframework::distributed::fsdp::detail
