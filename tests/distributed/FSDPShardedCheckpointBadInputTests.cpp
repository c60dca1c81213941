// Bad resharding checkpoints: every mismatch is an ArgumentError naming what differs, and the
// loading FSDP, its optimizer and its scaler keep their state.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
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
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "distributed/ReshardSupport.hpp"

namespace fsdp = mlframework::distributed::fsdp;
namespace optim = mlframework::optimizers;
using Blobs = std::vector<std::vector<std::byte>>;
using mlfw_test::SimulatedRankGroup;

namespace {

std::unique_ptr<fsdp::FSDP> Model(int rank, int world, const std::string& embed = "embed",
                                  const mlframework::GradientMap& head = mlfw_test::ReshardHead()) {
  auto model = std::make_unique<fsdp::FSDP>(std::make_shared<SimulatedRankGroup>(rank, world));
  model->RegisterUnit(embed, mlfw_test::ReshardEmbed());
  model->RegisterUnit("head", head);
  return model;
}

// The blobs of a 4-rank save with AdamW state (one step taken), a backed-off scaler, step 7.
Blobs SavedAtFour(std::int64_t step = 7, bool with_optimizer = true) {
  Blobs blobs;
  mlframework::amp::DynamicLossScaler scaler;
  scaler.UpdateScale(true);
  for (int r = 0; r < 4; ++r) {
    auto model = Model(r, 4);
    optim::Adam adam(model->ShardedParameters(), optim::AdamOptions::AdamW());
    for (std::size_t u = 0; u < model->UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = model->Unit(u);
      model->Unit(u).SetLocalGradient(
          mlframework::FromVector(std::vector<float>(unit.ShardSize(), 0.5f), {unit.ShardSize()}));
    }
    model->Step(adam);
    blobs.push_back(model->SaveShardedCheckpoint(
        {.Optimizer = with_optimizer ? &adam : nullptr, .Scaler = fsdp::BlobState::Of(scaler), .Step = step}));
  }
  return blobs;
}

// FNV-1a over everything before the trailing checksum, written back (StateBlob.hpp's frame).
void Reseal(std::vector<std::byte>& blob) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < blob.size() - 8; ++i) {
    hash ^= static_cast<std::uint8_t>(blob[i]);
    hash *= 0x100000001b3ULL;
  }
  for (int b = 0; b < 8; ++b) blob[blob.size() - 8 + static_cast<std::size_t>(b)] = std::byte((hash >> (8 * b)) & 0xff);
}

// A rank-1-of-3 loader with AdamW and a scaler; Expect() loads and checks the error and that
// nothing changed.
struct Loader {
  std::unique_ptr<fsdp::FSDP> model = Model(1, 3);
  optim::Adam adam{model->ShardedParameters(), optim::AdamOptions::AdamW()};
  mlframework::amp::DynamicLossScaler scaler;

  std::vector<std::byte> Snapshot() {
    return model->SaveShardedCheckpoint({.Optimizer = &adam, .Scaler = fsdp::BlobState::Of(scaler)});
  }
  void Expect(const Blobs& blobs, const std::string& message, const std::string& parameter = "saved_ranks",
              mlframework::amp::IOptimizer* optimizer = nullptr) {
    const std::vector<std::byte> before = Snapshot();
    try {
      model->LoadShardedCheckpoint(blobs,
                                   {.Optimizer = optimizer ? optimizer : &adam, .Scaler = fsdp::BlobState::Of(scaler)});
      BOOST_ERROR("no exception; expected: " << message);
    } catch (const mlframework::ArgumentError& error) {
      BOOST_TEST_CONTEXT(error.what()) {
        BOOST_CHECK_NE(std::string(error.what()).find(message), std::string::npos);
        BOOST_CHECK_EQUAL(error.Parameter().rfind(parameter, 0), 0u);
      }
    }
    BOOST_CHECK(Snapshot() == before);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpShardedCheckpointBadInput)

BOOST_AUTO_TEST_CASE(missing_duplicate_and_foreign_ranks_name_the_rank) {
  const Blobs blobs = SavedAtFour();
  Loader loader;
  loader.Expect({blobs[0], blobs[1], blobs[3]}, "saved rank 2 of 4 is missing");
  loader.Expect({blobs[0], blobs[1], blobs[1], blobs[3]}, "saved_ranks[2] and saved_ranks[1] are both saved rank 1");
  loader.Expect({}, "holds no blob");
  // A world size of 4 billion (re-sealed): reported as missing ranks, no allocation by it.
  Blobs huge = blobs;
  for (std::vector<std::byte>& blob : huge) {
    blob[55] = std::byte{0xf0};  // the saved world size's high byte (payload from 52)
    Reseal(blob);
  }
  loader.Expect(huge, "saved rank 4 of 4026531844 is missing");
  const Blobs later = SavedAtFour(8);
  loader.Expect({blobs[0], blobs[1], later[2], blobs[3]}, "saved_ranks[2] has training step 8, saved_ranks[0] 7");
  // Blobs of a 2-rank save mixed in.
  Blobs two;
  for (int r = 0; r < 2; ++r) two.push_back(Model(r, 2)->SaveShardedCheckpoint({.Step = 7}));
  loader.Expect({blobs[0], two[1]}, "saved_ranks[1] was saved at world size 2, saved_ranks[0] at 4");
}

BOOST_AUTO_TEST_CASE(another_model_names_the_unit_parameter_and_shape) {
  const Blobs blobs = SavedAtFour();
  {
    auto model = Model(0, 2, "embedding");
    const auto before = model->SaveShardedCheckpoint();
    try {
      model->LoadShardedCheckpoint(blobs);
      BOOST_ERROR("no exception");
    } catch (const mlframework::ArgumentError& error) {
      BOOST_CHECK_NE(std::string(error.what()).find("unit 0 is 'embed' in the checkpoint, 'embedding' here"),
                     std::string::npos);
    }
    BOOST_CHECK(model->SaveShardedCheckpoint() == before);
  }
  {
    mlframework::GradientMap head = mlfw_test::ReshardHead();
    head["weight"] = mlframework::FromVector(head["weight"]->ToFloatVector(), {9, 1});
    auto model = Model(0, 2, "embed", head);
    try {
      model->LoadShardedCheckpoint(blobs);
      BOOST_ERROR("no exception");
    } catch (const mlframework::ArgumentError& error) {
      BOOST_CHECK_NE(std::string(error.what()).find("'weight' [3, 3] in the checkpoint, 'weight' [9, 1] here"),
                     std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(another_optimizer_kind_or_options_are_rejected) {
  const Blobs blobs = SavedAtFour();
  Loader loader;
  optim::SGD sgd(loader.model->ShardedParameters());
  loader.Expect(blobs, "is SGD but the checkpoint holds Adam state", "contents.Optimizer", &sgd);
  optim::Adam plain(loader.model->ShardedParameters());  // Adam, not AdamW
  loader.Expect(blobs, "Adam option WeightDecay is 0.010000 in the checkpoint, 0.000000 here", "contents.Optimizer",
                &plain);
  optim::Adam elsewhere({{"embed", mlframework::Zeros({16}, mlframework::DataType::Float32)}});
  loader.Expect(blobs, "is not built over this FSDP's ShardedParameters()", "contents.Optimizer", &elsewhere);
  loader.Expect(SavedAtFour(7, false), "is set but the checkpoint holds no optimizer state", "contents.Optimizer");
}

BOOST_AUTO_TEST_CASE(corrupt_truncated_and_other_version_blobs_name_the_blob) {
  const Blobs blobs = SavedAtFour();
  Loader loader;
  Blobs damaged = blobs;
  damaged[1].resize(damaged[1].size() / 2);
  loader.Expect(damaged, "", "saved_ranks[1]");
  damaged = blobs;
  damaged[2][damaged[2].size() / 2] ^= std::byte{0x40};
  loader.Expect(damaged, "checksum mismatch", "saved_ranks[2]");
  damaged = blobs;
  damaged[3][6] = std::byte{7};  // a payload version not written yet (StateBlob.hpp frame), checksum made right again
  Reseal(damaged[3]);
  loader.Expect(damaged, "state version 7", "saved_ranks[3]");
  damaged = blobs;
  damaged[0].push_back(std::byte{0});
  loader.Expect(damaged, "", "saved_ranks[0]");
}

BOOST_AUTO_TEST_CASE(a_scaler_state_the_scaler_rejects_changes_nothing) {
  const Blobs blobs = SavedAtFour();
  auto model = Model(0, 3);
  const auto before = model->SaveShardedCheckpoint();
  optim::mixed_precision::DynamicLossScaler other_kind;
  const auto scaler_before = other_kind.StateDict();
  BOOST_CHECK_THROW(model->LoadShardedCheckpoint(blobs, {.Scaler = fsdp::BlobState::Of(other_kind)}),
                    mlframework::ArgumentError);
  BOOST_CHECK(model->SaveShardedCheckpoint() == before);
  BOOST_CHECK(other_kind.StateDict() == scaler_before);
  // A scaler asked for from a checkpoint without one.
  Blobs without;
  for (int r = 0; r < 2; ++r) without.push_back(Model(r, 2)->SaveShardedCheckpoint());
  mlframework::amp::DynamicLossScaler scaler;
  BOOST_CHECK_THROW(model->LoadShardedCheckpoint(without, {.Scaler = fsdp::BlobState::Of(scaler)}),
                    mlframework::ArgumentError);
}

BOOST_AUTO_TEST_CASE(bad_arguments_and_states_of_the_fsdp) {
  auto model = Model(0, 1);
  BOOST_CHECK_THROW(static_cast<void>(model->SaveShardedCheckpoint({.Step = -1})), mlframework::ArgumentError);
  optim::Adam foreign({{"w", mlframework::Zeros({4}, mlframework::DataType::Float32)}});
  BOOST_CHECK_THROW(static_cast<void>(model->SaveShardedCheckpoint({.Optimizer = &foreign})),
                    mlframework::ArgumentError);
  BOOST_CHECK_THROW(static_cast<void>(fsdp::ShardedCheckpointFileName(-1)), mlframework::ArgumentError);

  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "mlfw-reshard-no-such-dir";
  std::filesystem::remove_all(missing);
  BOOST_CHECK_THROW(static_cast<void>(fsdp::ReadShardedCheckpointDirectory(missing)), mlframework::ArgumentError);
  BOOST_CHECK_THROW(static_cast<void>(model->LoadShardedCheckpointFiles(missing)), mlframework::ArgumentError);
  std::filesystem::create_directories(missing);
  BOOST_CHECK_THROW(static_cast<void>(model->LoadShardedCheckpointFiles(missing)), mlframework::ArgumentError);
  std::filesystem::remove_all(missing);

  // A gathered unit: the load is refused on every rank before anything is read.
  fsdp::FSDP local(mlframework::distributed::MakeLocalProcessGroup());
  local.RegisterUnit("embed", mlfw_test::ReshardEmbed());
  local.RegisterUnit("head", mlfw_test::ReshardHead());
  const auto blob = local.SaveShardedCheckpoint();
  local.Unit(0).Gather();
  BOOST_CHECK_THROW(static_cast<void>(local.LoadShardedCheckpoint(Blobs{blob})), mlframework::InvalidOperationError);
  local.Unit(0).Release();
  BOOST_CHECK_EQUAL(local.LoadShardedCheckpoint(Blobs{blob}), 0);
}

// A gather or a gradient reduction in flight still reads the shard or lands a gradient after the
// load: the load is refused, as while a unit is gathered, and the shard, the gradient on its way
// and the optimizer stay as they were. Loaded anyway, the gather would hand out the parameters
// of before the load and the reduction a gradient of the old model, silently.
BOOST_AUTO_TEST_CASE(a_gather_or_a_reduction_in_flight_refuses_the_load_and_changes_nothing) {
  fsdp::FSDP saved(mlframework::distributed::MakeLocalProcessGroup());
  saved.RegisterUnit("embed", mlfw_test::ReshardEmbed(2.0f));
  saved.RegisterUnit("head", mlfw_test::ReshardHead(2.0f));
  optim::Adam saved_adam(saved.ShardedParameters());
  const Blobs blobs{saved.SaveShardedCheckpoint({.Optimizer = &saved_adam, .Step = 5})};

  fsdp::FSDP local(mlframework::distributed::MakeLocalProcessGroup());
  fsdp::FSDPShardingUnit& embed = local.RegisterUnit("embed", mlfw_test::ReshardEmbed());
  local.RegisterUnit("head", mlfw_test::ReshardHead());
  optim::Adam adam(local.ShardedParameters());
  const std::vector<float> before = embed.LocalShard()->ToFloatVector();
  const auto refused = [&](const std::string& what) {
    BOOST_TEST_CONTEXT(what) {
      try {
        static_cast<void>(local.LoadShardedCheckpoint(blobs, {.Optimizer = &adam}));
        BOOST_ERROR("the load went ahead");
      } catch (const mlframework::InvalidOperationError& error) {
        BOOST_TEST(std::string(error.what()).find("'embed'") != std::string::npos, error.what());
      }
      BOOST_TEST(embed.LocalShard()->ToFloatVector() == before, boost::test_tools::per_element());
      BOOST_TEST(adam.StepCount() == 0);
    }
  };

  embed.GatherAsync();
  refused("a gather in flight");
  embed.WaitGather();
  // The gathered parameters are the shard's, as it still is.
  BOOST_TEST(embed.Parameters().at("bias")->ToFloatVector() == mlfw_test::ReshardEmbed().at("bias")->ToFloatVector(),
             boost::test_tools::per_element());
  std::vector<float> ones(5, 1.0f);
  embed.ReduceGradientsAsync({{"weight", mlframework::Zeros({6, 7})}, {"bias", mlframework::FromVector(ones, {5})}});
  embed.Release();
  refused("a reduction in flight");
  embed.WaitReduce();
  BOOST_TEST(embed.LocalGradient() != nullptr);
  BOOST_CHECK_EQUAL(local.LoadShardedCheckpoint(blobs, {.Optimizer = &adam}), 5);
  BOOST_TEST(embed.LocalGradient() == nullptr);  // dropped by the load
}

BOOST_AUTO_TEST_SUITE_END()
