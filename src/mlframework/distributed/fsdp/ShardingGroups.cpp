#include "mlframework/distributed/fsdp/ShardingGroups.hpp"

#include <array>
#include <string>

#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/Agreement.hpp"

namespace mlframework::distributed::fsdp::detail {

void ValidateShardGroupSize(ShardingStrategy strategy, int shard_group_size) {
  if (strategy == ShardingStrategy::HybridShard && shard_group_size < 1) {
    throw ArgumentError("ShardGroupSize",
                        "HybridShard needs the ranks per shard group (>= 1), got " + std::to_string(shard_group_size));
  }
  if (strategy != ShardingStrategy::HybridShard && shard_group_size != 0) {
    throw ArgumentError("ShardGroupSize", "is for HybridShard only; " + std::string(ToString(strategy)) +
                                              " shards over the whole group, so it must be 0, got " +
                                              std::to_string(shard_group_size));
  }
}

ShardingGroups MakeShardingGroups(const std::shared_ptr<IProcessGroup>& world, const FSDPConfig& config) {
  if (config.Strategy != ShardingStrategy::HybridShard) {
    config.Validate();
    return {world, nullptr};
  }
  const int size = world->WorldSize();
  const int shard_size = config.ShardGroupSize;
  distributed::detail::AgreeOn(*world, "FSDP(HybridShard)", [&] {
    config.Validate();
    if (size % shard_size != 0) {
      throw ArgumentError("ShardGroupSize", "HybridShard: ShardGroupSize " + std::to_string(shard_size) +
                                                " does not divide the world size " + std::to_string(size));
    }
  });
  // The splits below are only consistent when every rank cuts the same mesh.
  const std::array<const char*, 2> fields{"ShardGroupSize", "world size"};
  const std::array<double, 2> mine{static_cast<double>(shard_size), static_cast<double>(size)};
  std::array<double, 4> extremes{mine[0], mine[1], -mine[0], -mine[1]};
  world->AllReduceHost(extremes, ReduceOp::Max);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const double high = extremes[i];
    const double low = -extremes[i + mine.size()];
    if (high != low) {
      throw ArgumentError("ShardGroupSize", std::string("HybridShard: ranks disagree on the ") + fields[i] +
                                                " (this rank " + std::to_string(static_cast<long long>(mine[i])) +
                                                ", min " + std::to_string(static_cast<long long>(low)) + ", max " +
                                                std::to_string(static_cast<long long>(high)) +
                                                "); every rank must use the same FSDPConfig");
    }
  }
  const int rank = world->Rank();
  ShardingGroups groups;
  groups.shard = world->Split(rank / shard_size, rank);
  groups.replicate = world->Split(rank % shard_size, rank);
  // An engine's Split must give each rank its place in the mesh; checked once, on every rank.
  distributed::detail::AgreeOn(*world, "FSDP(HybridShard) groups", [&] {
    if (!groups.shard || !groups.replicate || groups.shard->WorldSize() != shard_size ||
        groups.shard->Rank() != rank % shard_size || groups.replicate->WorldSize() != size / shard_size ||
        groups.replicate->Rank() != rank / shard_size) {
      throw InvalidOperationError("the '" + std::string(world->BackendName()) +
                                  "' process group's Split did not form groups of consecutive ranks as asked");
    }
  });
  return groups;
}

double AgreedSquareSum(IProcessGroup& world, const ShardingGroups& groups, ShardingStrategy strategy,
                       double local_sum) {
  if (strategy == ShardingStrategy::NoShard) return world.AllReduceHost(local_sum, ReduceOp::Max);
  double sum = groups.shard->AllReduceHost(local_sum, ReduceOp::Sum);
  if (groups.replicate) sum = groups.replicate->AllReduceHost(sum, ReduceOp::Max);
  return sum;
}

}  // namespace mlframework::distributed::fsdp::detail
