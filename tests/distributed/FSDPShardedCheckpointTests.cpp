// Resharding checkpoints in one process: N simulated ranks save, M simulated ranks load, and the
// full masters and optimizer state come back bit for bit, however the ranges were cut.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "distributed/ReshardSupport.hpp"

namespace fsdp = mlframework::distributed::fsdp;
namespace optim = mlframework::optimizers;
using mlfw_test::SimulatedRankGroup;

namespace {

// One simulated rank: its FSDP over the two test units and its optimizer over the shards.
struct SimRank {
  std::unique_ptr<fsdp::FSDP> model;
  std::unique_ptr<optim::Adam> adam;
  std::unique_ptr<optim::SGD> sgd;
  mlframework::amp::IOptimizer* Optimizer() const {
    return adam ? static_cast<mlframework::amp::IOptimizer*>(adam.get()) : sgd.get();
  }
};

enum class CheckpointOpt { Adam, SGD };

// The parameters as tensors of the fake device backend (CPU memory that reports cuda:0).
mlframework::GradientMap OnFakeDevice(const mlframework::GradientMap& parameters) {
  mlframework::GradientMap fake;
  for (const auto& [name, tensor] : parameters) {
    fake.emplace(name,
                 mlfw_test::FakeTensor(tensor->ToFloatVector(), tensor->GetShape(), mlframework::DataType::Float32));
  }
  return fake;
}

std::vector<SimRank> MakeWorld(int world, float amplitude, CheckpointOpt opt,
                               fsdp::ShardingStrategy strategy = fsdp::ShardingStrategy::FullShard,
                               bool fake_device = false) {
  std::vector<SimRank> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    SimRank& rank = ranks[static_cast<std::size_t>(r)];
    rank.model = std::make_unique<fsdp::FSDP>(std::make_shared<SimulatedRankGroup>(r, world),
                                              fsdp::FSDPConfig{.Strategy = strategy});
    const auto place = [&](const mlframework::GradientMap& p) { return fake_device ? OnFakeDevice(p) : p; };
    rank.model->RegisterUnit("embed", place(mlfw_test::ReshardEmbed(amplitude)));
    rank.model->RegisterUnit("head", place(mlfw_test::ReshardHead(amplitude)));
    if (opt == CheckpointOpt::Adam) {
      rank.adam = std::make_unique<optim::Adam>(rank.model->ShardedParameters(), optim::AdamOptions::AdamW(2e-3f));
    } else {
      rank.sgd = std::make_unique<optim::SGD>(rank.model->ShardedParameters(),
                                              optim::SGDOptions{.LearningRate = 0.05f, .Momentum = 0.9f});
    }
  }
  return ranks;
}

// The global gradient of flat element e at @p step (what a reduction would leave everywhere).
float GlobalGradient(std::size_t unit, std::size_t e, int step) {
  return std::sin(0.37f * static_cast<float>(e) + 0.5f * static_cast<float>(unit) + static_cast<float>(step));
}

// One optimizer step on every simulated rank, each with its range of the global gradients.
void StepAll(std::vector<SimRank>& ranks, int step) {
  for (SimRank& rank : ranks) {
    for (std::size_t u = 0; u < rank.model->UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
      std::vector<float> g(unit.ShardSize(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const std::size_t e = unit.ShardOffset() + i;
        if (e < unit.NumElements()) g[i] = GlobalGradient(u, e, step);
      }
      unit.SetLocalGradient(mlframework::FromVector(g, {g.size()}));
    }
    rank.model->Step(*rank.Optimizer());
  }
}

// What a unit holds over the whole world, element by element: masters (state < 0) or an
// optimizer state vector, stitched from every rank's range. Also checks the padding is zero.
std::vector<float> Stitch(const std::vector<SimRank>& ranks, std::size_t u, int state) {
  const fsdp::FSDPShardingUnit& first = ranks.front().model->Unit(u);
  std::vector<float> full(first.NumElements(), std::nanf(""));
  for (const SimRank& rank : ranks) {
    const fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
    std::vector<float> values;
    if (state < 0) {
      values = unit.LocalShard()->ToFloatVector();
    } else {
      std::span<const float> span;
      if (rank.adam) span = state == 0 ? rank.adam->FirstMoments(unit.Name()) : rank.adam->SecondMoments(unit.Name());
      if (rank.sgd) span = rank.sgd->MomentumBuffer(unit.Name());
      if (span.empty()) return {};
      values.assign(span.begin(), span.end());
    }
    BOOST_REQUIRE_EQUAL(values.size(), unit.ShardSize());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::size_t e = unit.ShardOffset() + i;
      if (e < full.size()) {
        full[e] = values[i];
      } else {
        BOOST_CHECK_EQUAL(values[i], 0.0f);  // padding
      }
    }
  }
  return full;
}

// Bitwise equality of two float vectors (NaN-safe: no element may be left unset).
void CheckSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE_EQUAL(a.size(), b.size());
    BOOST_CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    for (const float v : a) BOOST_REQUIRE(!std::isnan(v));
  }
}

void CheckSameState(const std::vector<SimRank>& a, const std::vector<SimRank>& b, const std::string& what) {
  for (std::size_t u = 0; u < 2; ++u) {
    CheckSameBits(Stitch(a, u, -1), Stitch(b, u, -1), what + ": masters of unit " + std::to_string(u));
    const int states = a.front().adam ? 2 : 1;
    for (int s = 0; s < states; ++s) {
      CheckSameBits(Stitch(a, u, s), Stitch(b, u, s),
                    what + ": state " + std::to_string(s) + " of unit " + std::to_string(u));
    }
  }
}

std::vector<std::vector<std::byte>> SaveAll(const std::vector<SimRank>& ranks, std::int64_t step,
                                            const fsdp::BlobState& scaler = {}) {
  std::vector<std::vector<std::byte>> blobs;
  blobs.reserve(ranks.size());
  for (const SimRank& rank : ranks) {
    blobs.push_back(rank.model->SaveShardedCheckpoint({.Optimizer = rank.Optimizer(), .Scaler = scaler, .Step = step}));
  }
  return blobs;
}

void LoadAll(std::vector<SimRank>& ranks, const std::vector<std::vector<std::byte>>& blobs, std::int64_t step) {
  for (SimRank& rank : ranks) {
    BOOST_CHECK_EQUAL(rank.model->LoadShardedCheckpoint(blobs, {.Optimizer = rank.Optimizer()}), step);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpShardedCheckpoint)

BOOST_AUTO_TEST_CASE(adam_state_saved_at_four_ranks_loads_bit_identical_at_one_two_three_and_five) {
  std::vector<SimRank> saved = MakeWorld(4, 1.0f, CheckpointOpt::Adam);
  StepAll(saved, 0);
  StepAll(saved, 1);
  for (SimRank& rank : saved) rank.adam->SetLearningRate(5e-4f);  // a scheduler's change travels too
  const auto blobs = SaveAll(saved, 2);
  for (const int world : {1, 2, 3, 5}) {
    BOOST_TEST_CONTEXT("load at " << world << " ranks") {
      std::vector<SimRank> loaded = MakeWorld(world, 2.0f, CheckpointOpt::Adam);  // other weights, fresh state
      LoadAll(loaded, blobs, 2);
      CheckSameState(saved, loaded, "after the load");
      for (const SimRank& rank : loaded) {
        BOOST_CHECK_EQUAL(rank.adam->StepCount(), 2);
        BOOST_CHECK_EQUAL(rank.adam->Options().LearningRate, 5e-4f);
      }
      // Training goes on identically: the same global gradients give the same bits.
      std::vector<SimRank> reference = MakeWorld(4, 1.0f, CheckpointOpt::Adam);
      StepAll(reference, 0);
      StepAll(reference, 1);
      for (SimRank& rank : reference) rank.adam->SetLearningRate(5e-4f);
      StepAll(reference, 2);
      StepAll(loaded, 2);
      CheckSameState(reference, loaded, "one step after the load");
    }
  }
}

BOOST_AUTO_TEST_CASE(sgd_momentum_absent_before_the_first_step_stays_absent_and_present_after_it_reshards) {
  std::vector<SimRank> fresh = MakeWorld(3, 1.0f, CheckpointOpt::SGD);
  std::vector<SimRank> loaded = MakeWorld(2, 3.0f, CheckpointOpt::SGD);
  LoadAll(loaded, SaveAll(fresh, 0), 0);
  BOOST_CHECK(Stitch(loaded, 0, 0).empty());  // PyTorch's lazy buffer: none yet
  CheckSameBits(Stitch(fresh, 0, -1), Stitch(loaded, 0, -1), "masters");

  StepAll(fresh, 0);
  std::vector<SimRank> later = MakeWorld(4, 3.0f, CheckpointOpt::SGD);
  LoadAll(later, SaveAll(fresh, 1), 1);
  CheckSameState(fresh, later, "after one SGD step");
  BOOST_CHECK_EQUAL(later.front().sgd->StepCount(), 1);
  StepAll(fresh, 1);
  StepAll(later, 1);
  CheckSameState(fresh, later, "one SGD step after the load");
}

BOOST_AUTO_TEST_CASE(no_shard_checkpoint_loads_into_full_shard_ranks_and_back) {
  std::vector<SimRank> replicated = MakeWorld(2, 1.0f, CheckpointOpt::Adam, fsdp::ShardingStrategy::NoShard);
  StepAll(replicated, 0);
  std::vector<SimRank> sharded = MakeWorld(3, 2.0f, CheckpointOpt::Adam);
  LoadAll(sharded, SaveAll(replicated, 1), 1);
  CheckSameState(replicated, sharded, "NoShard to FullShard");
  std::vector<SimRank> back = MakeWorld(1, 2.0f, CheckpointOpt::Adam, fsdp::ShardingStrategy::NoShard);
  LoadAll(back, SaveAll(sharded, 1), 1);
  CheckSameState(replicated, back, "FullShard to NoShard");
}

BOOST_AUTO_TEST_CASE(device_resident_shards_reshard_and_the_optimizers_host_masters_follow) {
  // Shards the host cannot address: saved through a read-back, loaded through a copy; Adam and
  // SGD keep host FP32 masters for them (ZeRO-Offload style), which the load must replace too,
  // or the next step would write the old masters back over the loaded shards.
  for (const CheckpointOpt opt : {CheckpointOpt::Adam, CheckpointOpt::SGD}) {
    std::vector<SimRank> saved = MakeWorld(2, 1.0f, opt, fsdp::ShardingStrategy::FullShard, true);
    BOOST_REQUIRE(saved.front().model->Unit(0).LocalShard()->HostBytes().empty());
    StepAll(saved, 0);
    std::vector<SimRank> loaded = MakeWorld(3, 2.0f, opt, fsdp::ShardingStrategy::FullShard, true);
    LoadAll(loaded, SaveAll(saved, 1), 1);
    CheckSameState(saved, loaded, "device-resident, after the load");
    StepAll(saved, 1);
    StepAll(loaded, 1);
    CheckSameState(saved, loaded, "device-resident, one step after the load");
  }
}

BOOST_AUTO_TEST_CASE(scaler_state_and_training_step_travel_with_the_shards) {
  std::vector<SimRank> saved = MakeWorld(2, 1.0f, CheckpointOpt::Adam);
  mlframework::amp::DynamicLossScaler scaler;
  scaler.UpdateScale(true);  // backed off: not the default state
  const auto blobs = SaveAll(saved, 41, fsdp::BlobState::Of(scaler));
  std::vector<SimRank> loaded = MakeWorld(3, 2.0f, CheckpointOpt::Adam);
  mlframework::amp::DynamicLossScaler restored;
  BOOST_REQUIRE_NE(restored.CurrentScale(), scaler.CurrentScale());
  for (SimRank& rank : loaded) {
    BOOST_CHECK_EQUAL(rank.model->LoadShardedCheckpoint(
                          blobs, {.Optimizer = rank.adam.get(), .Scaler = fsdp::BlobState::Of(restored)}),
                      41);
  }
  BOOST_CHECK(restored.StateDict() == scaler.StateDict());
  // Weights only: a load without optimizer or scaler takes the masters and skips the rest.
  std::vector<SimRank> weights_only = MakeWorld(1, 2.0f, CheckpointOpt::Adam);
  BOOST_CHECK_EQUAL(weights_only.front().model->LoadShardedCheckpoint(blobs), 41);
  CheckSameBits(Stitch(saved, 1, -1), Stitch(weights_only, 1, -1), "weights only");
  BOOST_CHECK_EQUAL(weights_only.front().adam->StepCount(), 0);
}

BOOST_AUTO_TEST_CASE(files_round_trip_through_a_directory_and_stale_ranks_are_removed) {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("mlfw-reshard-" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  std::vector<SimRank> saved = MakeWorld(3, 1.0f, CheckpointOpt::Adam);
  StepAll(saved, 0);
  const auto blobs = SaveAll(saved, 9);
  std::filesystem::create_directories(directory);
  for (std::size_t r = 0; r < blobs.size(); ++r) {
    fsdp::WriteCheckpointFile(directory / fsdp::ShardedCheckpointFileName(static_cast<int>(r)), blobs[r]);
  }
  BOOST_CHECK_EQUAL(fsdp::ShardedCheckpointFileName(3), "shard-00003.mlfw");
  BOOST_CHECK(fsdp::ReadShardedCheckpointDirectory(directory) == blobs);
  std::vector<SimRank> loaded = MakeWorld(2, 2.0f, CheckpointOpt::Adam);
  for (SimRank& rank : loaded) {
    BOOST_CHECK_EQUAL(rank.model->LoadShardedCheckpointFiles(directory, {.Optimizer = rank.adam.get()}), 9);
  }
  CheckSameState(saved, loaded, "through files");

  // The collective save of a one-rank group replaces the three files by one.
  fsdp::FSDP single(mlframework::distributed::MakeLocalProcessGroup());
  single.RegisterUnit("embed", mlfw_test::ReshardEmbed());
  single.RegisterUnit("head", mlfw_test::ReshardHead());
  single.SaveShardedCheckpointFiles(directory, {.Step = 3});
  BOOST_CHECK(std::filesystem::exists(directory / "shard-00000.mlfw"));
  BOOST_CHECK(!std::filesystem::exists(directory / "shard-00001.mlfw"));
  BOOST_CHECK(!std::filesystem::exists(directory / "shard-00002.mlfw"));
  BOOST_CHECK(!std::filesystem::exists(directory / "shard-00000.mlfw.tmp"));
  BOOST_CHECK_EQUAL(single.LoadShardedCheckpointFiles(directory), 3);
  std::filesystem::remove_all(directory);
}

BOOST_AUTO_TEST_CASE(optimizer_accessors_and_restore_state_check_their_input) {
  optim::Adam adam({{"w", mlframework::FromVector({1.0f, 2.0f}, {2})}});
  BOOST_CHECK_THROW(static_cast<void>(adam.FirstMoments("v")), mlframework::ArgumentError);
  BOOST_CHECK_THROW(adam.RestoreState({{"w", {{1.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}}}}, 1), mlframework::ArgumentError);
  BOOST_CHECK_THROW(adam.RestoreState({{"v", {{1.0f, 1.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}}}}, 1),
                    mlframework::ArgumentError);
  BOOST_CHECK_THROW(adam.RestoreState({{"w", {{1.0f, 1.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}}}}, -1),
                    mlframework::ArgumentError);
  BOOST_CHECK_EQUAL(adam.MasterWeights().at("w")->ToFloatVector()[0], 1.0f);  // unchanged
  adam.RestoreState({{"w", {{3.0f, 4.0f}, {0.5f, 0.25f}, {0.125f, 1.0f}}}}, 5);
  BOOST_CHECK_EQUAL(adam.MasterWeights().at("w")->ToFloatVector()[1], 4.0f);
  BOOST_CHECK_EQUAL(adam.SecondMoments("w")[0], 0.125f);
  BOOST_CHECK_EQUAL(adam.StepCount(), 5);

  optim::SGD sgd({{"w", mlframework::FromVector({1.0f, 2.0f}, {2}, mlframework::DataType::BFloat16)}},
                 {.LearningRate = 0.1f, .Momentum = 0.5f});
  BOOST_CHECK(sgd.MomentumBuffer("w").empty());
  BOOST_CHECK_THROW(sgd.RestoreState({{"w", {{1.0f, 1.0f}, {1.0f}}}}, 0), mlframework::ArgumentError);
  sgd.RestoreState({{"w", {{8.0f, 16.0f}, {1.0f, -1.0f}}}}, 2);
  BOOST_CHECK_EQUAL(sgd.Parameters().at("w")->ToFloatVector()[1], 16.0f);  // rounded into the BF16 parameter
  BOOST_CHECK_EQUAL(sgd.MomentumBuffer("w")[1], -1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
