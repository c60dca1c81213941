// Save at N ranks, resume at M: ctest runs FsdpReshardSave under mpiexec -n 4 into
// $MLFW_RESHARD_DIR (a FullShard run, a HybridShard run of 2 groups of 2 ranks, and FullShard
// runs with BF16 master shards, one with 16-bit remainders, one rounded stochastically), then
// FsdpReshardLoad under -n 2 and -n 3 from it (into FullShard). The loader compares, bit
// for bit, the full parameters after the load with an uninterrupted run at its own world size
// stopped at the same step, and every later loss, loss scale and the final parameters with
// that run continued: the test model's reduced gradients are exact at any world size
// (ReshardSupport.hpp), so nothing but a wrong load can make them differ. Without the variable
// (the single-process suite run) each suite saves and loads at its own world size in a
// temporary directory.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "distributed/DistributedTestUtil.hpp"
#include "distributed/ReshardSupport.hpp"

namespace fsdp = mlframework::distributed::fsdp;
using mlfw_test::SameBits;

namespace {

constexpr int kSavedStep = 3;  // steps before the checkpoint
constexpr int kMoreSteps = 3;  // steps after it

// The BF16 master formats of the runs with BF16 master shards, and their subdirectories.
constexpr std::array<std::pair<mlframework::MasterFormat, const char*>, 2> kBFloat16Masters = {
    {{mlframework::MasterFormat::BFloat16Remainder, "bf16-remainders"},
     {mlframework::MasterFormat::BFloat16StochasticRounding, "bf16-rounding"}}};

struct Training {
  std::shared_ptr<mlframework::distributed::IProcessGroup> group;
  fsdp::FSDP model;
  mlframework::optimizers::Adam adam;
  mlframework::amp::DynamicLossScaler scaler;

  // FullShard, or HybridShard with shard groups of @p shard_group_size ranks when it is > 0;
  // with @p masters other than Float32, BF16 master shards whose optimizer keeps 16-bit
  // remainders (exact FP32 masters) or rounds them stochastically (bits drawn by the element's
  // index in the unit): either way the trajectory is the same at any world size.
  Training(const std::shared_ptr<mlframework::distributed::IProcessGroup>& g, float amplitude, int shard_group_size = 0,
           mlframework::MasterFormat masters = mlframework::MasterFormat::Float32)
      : group(g),
        model(g, {.Strategy =
                      shard_group_size > 0 ? fsdp::ShardingStrategy::HybridShard : fsdp::ShardingStrategy::FullShard,
                  .ParamDType = mlframework::DataType::Float32,
                  .ReduceDType = mlframework::DataType::Float32,
                  .MasterDType = masters != mlframework::MasterFormat::Float32 ? mlframework::DataType::BFloat16
                                                                               : mlframework::DataType::Float32,
                  .ShardGroupSize = shard_group_size}),
        adam(Registered(model, amplitude), Options(masters)),
        scaler({.InitialScale = 1024.0f, .GrowthInterval = 2}) {}

  static mlframework::optimizers::AdamOptions Options(mlframework::MasterFormat masters) {
    mlframework::optimizers::AdamOptions options = mlframework::optimizers::AdamOptions::AdamW(1e-2f, 1e-2f);
    options.Masters = masters;
    options.RoundingSeed = 0x5eed;
    return options;
  }

  // Registers the two units; returns the shards for the optimizer.
  static mlframework::GradientMap Registered(fsdp::FSDP& fsdp, float amplitude) {
    fsdp.RegisterUnit("embed", mlfw_test::ReshardEmbed(amplitude));
    fsdp.RegisterUnit("head", mlfw_test::ReshardHead(amplitude));
    return fsdp.ShardedParameters();
  }

  fsdp::ShardedCheckpointContents Contents(std::int64_t step) {
    return {.Optimizer = &adam, .Scaler = fsdp::BlobState::Of(scaler), .Step = step};
  }

  // One step at @p step; returns the loss before the update (from the full parameters).
  double Step(int step) {
    const double loss = mlfw_test::ExactModel::Loss(model.FullParameters(), {"embed", "head"}, step);
    for (std::size_t u = 0; u < model.UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = model.Unit(u);
      unit.Gather();
      unit.ReduceGradients(mlfw_test::ExactModel::RankGradients(unit, u, group->Rank(), group->WorldSize(), step));
      unit.Release();
    }
    model.Step(adam);
    scaler.UpdateScale(false);  // grows every second step: its state must travel too
    return loss;
  }

  std::vector<float> Flat() {
    std::vector<float> flat;
    for (const auto& [name, tensor] : model.FullParameters()) {
      const std::vector<float> values = tensor->ToFloatVector();
      flat.insert(flat.end(), values.begin(), values.end());
    }
    return flat;
  }
};

// The FullShard run saves into @p directory, a HybridShard run (shard groups of 2 ranks when
// the world size is even, else 1) into its "hybrid" subdirectory: under -n 4, 2 groups of 2;
// FullShard runs with BF16 master shards, with remainders into "bf16-remainders", rounded
// stochastically into "bf16-rounding".
void Save(const std::filesystem::path& directory) {
  auto group = mlfw_test::WorldGroup();
  for (const bool hybrid : {false, true}) {
    Training run(group, 1.0f, hybrid ? (group->WorldSize() % 2 == 0 ? 2 : 1) : 0);
    for (int step = 0; step < kSavedStep; ++step) run.Step(step);
    run.model.SaveShardedCheckpointFiles(hybrid ? directory / "hybrid" : directory, run.Contents(kSavedStep));
  }
  for (const auto& [masters, subdirectory] : kBFloat16Masters) {
    Training run(group, 1.0f, 0, masters);
    for (int step = 0; step < kSavedStep; ++step) run.Step(step);
    run.model.SaveShardedCheckpointFiles(directory / subdirectory, run.Contents(kSavedStep));
  }
  BOOST_TEST_MESSAGE("saved at " << group->WorldSize() << " ranks into " << directory);
}

// Resumes a FullShard run (with BF16 master shards kept as @p masters says) at this world size
// from @p directory and compares (see the top).
void LoadAndCompare(const std::filesystem::path& directory,
                    mlframework::MasterFormat masters = mlframework::MasterFormat::Float32) {
  auto group = mlfw_test::WorldGroup();
  Training reference(group, 1.0f, 0, masters);
  std::vector<double> losses;
  std::vector<float> scales;
  for (int step = 0; step < kSavedStep; ++step) reference.Step(step);
  const std::vector<float> at_checkpoint = reference.Flat();
  for (int step = kSavedStep; step < kSavedStep + kMoreSteps; ++step) {
    losses.push_back(reference.Step(step));
    scales.push_back(reference.scaler.CurrentScale());
  }

  Training resumed(group, 2.0f, 0, masters);  // other initial weights: everything must come from the files
  BOOST_REQUIRE_EQUAL(resumed.model.LoadShardedCheckpointFiles(directory, resumed.Contents(0)), kSavedStep);
  BOOST_CHECK_EQUAL(resumed.adam.StepCount(), kSavedStep);
  BOOST_CHECK(SameBits(resumed.Flat(), at_checkpoint));
  for (int step = kSavedStep; step < kSavedStep + kMoreSteps; ++step) {
    const double loss = resumed.Step(step);
    BOOST_TEST_CONTEXT("step " << step << " at " << group->WorldSize() << " ranks") {
      BOOST_CHECK_EQUAL(std::bit_cast<std::uint64_t>(loss),
                        std::bit_cast<std::uint64_t>(losses[static_cast<std::size_t>(step - kSavedStep)]));
      BOOST_CHECK_EQUAL(resumed.scaler.CurrentScale(), scales[static_cast<std::size_t>(step - kSavedStep)]);
    }
  }
  BOOST_CHECK(SameBits(resumed.Flat(), reference.Flat()));

  // Ranks handed different (each valid) checkpoints refuse together and keep their state.
  if (group->WorldSize() > 1 && masters == mlframework::MasterFormat::Float32) {
    fsdp::FSDP own(mlframework::distributed::MakeLocalProcessGroup());
    Training::Registered(own, 1.0f + static_cast<float>(group->Rank()));
    const std::vector<std::vector<std::byte>> mine{own.SaveShardedCheckpoint()};
    const std::vector<float> before = resumed.Flat();
    BOOST_CHECK_THROW(static_cast<void>(resumed.model.LoadShardedCheckpoint(mine)), mlframework::ArgumentError);
    BOOST_CHECK(SameBits(resumed.Flat(), before));
  }
  BOOST_TEST_MESSAGE("resumed at " << group->WorldSize() << " ranks: " << kMoreSteps << " losses bit-identical");
}

// $MLFW_RESHARD_DIR, or null when unset.
const char* SharedDirectory() { return std::getenv("MLFW_RESHARD_DIR"); }

// A directory of this job alone (rank 0's process id, agreed through the group).
std::filesystem::path PrivateDirectory(const char* suite) {
  auto group = mlfw_test::WorldGroup();
  const double id = group->AllReduceHost(group->Rank() == 0 ? static_cast<double>(::getpid()) : 0.0,
                                         mlframework::distributed::ReduceOp::Max);
  return std::filesystem::temp_directory_path() /
         (std::string("mlfw-") + suite + "-" + std::to_string(static_cast<long>(id)));
}

void SaveAndLoadHere(const char* suite) {
  const std::filesystem::path directory = PrivateDirectory(suite);
  Save(directory);
  LoadAndCompare(directory);
  LoadAndCompare(directory / "hybrid");
  for (const auto& [masters, subdirectory] : kBFloat16Masters) LoadAndCompare(directory / subdirectory, masters);
  auto group = mlfw_test::WorldGroup();
  group->Barrier();
  if (group->Rank() == 0) std::filesystem::remove_all(directory);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpReshardSave)

BOOST_AUTO_TEST_CASE(saves_a_checkpoint_after_three_steps) {
  if (const char* directory = SharedDirectory()) {
    Save(directory);
  } else {
    SaveAndLoadHere("reshard-save");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FsdpReshardLoad)

BOOST_AUTO_TEST_CASE(resumes_bit_identical_to_an_uninterrupted_run_at_this_world_size) {
  if (const char* directory = SharedDirectory()) {
    LoadAndCompare(directory);
    LoadAndCompare(std::filesystem::path(directory) / "hybrid");
    for (const auto& [masters, subdirectory] : kBFloat16Masters) {
      LoadAndCompare(std::filesystem::path(directory) / subdirectory, masters);
    }
  } else {
    SaveAndLoadHere("reshard-load");
  }
}

BOOST_AUTO_TEST_SUITE_END()
