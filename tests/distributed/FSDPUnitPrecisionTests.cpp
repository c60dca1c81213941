// Per-unit precision policies (UnitPrecision): a unit gathers and reduces in its own dtypes
// while the others follow the FSDP's, on 1, 2 or 4 ranks; ranks must agree on each policy.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;

namespace {

GradientMap Filled(std::size_t elements, float value) {
  return {{"weight", mlframework::FromVector(std::vector<float>(elements, value), {elements})}};
}

const fsdp::UnitPrecision kFp32{.ParamDType = DataType::Float32, .ReduceDType = DataType::Float32};

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpUnitPrecision)

BOOST_AUTO_TEST_CASE(AUnitGathersInItsOwnDtypeAndKeepsItAcrossSetParamDType) {
  fsdp::FSDP model(mlfw_test::WorldGroup(), {.ParamDType = DataType::BFloat16});
  auto& norm = model.RegisterUnit("norm", Filled(64, 1.0f), kFp32);
  auto& layer = model.RegisterUnit("layer", Filled(64, 1.0f));
  BOOST_TEST((norm.Precision().ParamDType == DataType::Float32));
  BOOST_TEST(!layer.Precision().ParamDType.has_value());
  for (const DataType forward : {DataType::BFloat16, DataType::Float16}) {
    model.SetParamDType(forward);  // as FSDPAmpIntegration sets its forward dtype
    BOOST_TEST((norm.ParamDType() == DataType::Float32));
    BOOST_TEST((layer.ParamDType() == forward));
    norm.Gather();
    layer.Gather();
    BOOST_TEST((norm.GatheredParameter()->GetDataType() == DataType::Float32));
    BOOST_TEST((layer.GatheredParameter()->GetDataType() == forward));
    BOOST_TEST((norm.Parameters().at("weight")->GetDataType() == DataType::Float32));
    norm.Release();
    layer.Release();
  }
}

BOOST_AUTO_TEST_CASE(AUnitReducesInItsOwnDtype) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, {.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16});
  auto& norm = model.RegisterUnit("norm", Filled(64, 1.0f), kFp32);
  auto& layer = model.RegisterUnit("layer", Filled(64, 1.0f));
  BOOST_TEST((norm.ReduceDType() == DataType::Float32));
  BOOST_TEST((layer.ReduceDType() == DataType::BFloat16));
  // 1 + 2^-12 needs 12 mantissa bits: FP32 keeps it, BF16 (7 bits) rounds it to 1.
  const float fine = 1.0f + std::ldexp(1.0f, -12);
  for (fsdp::FSDPShardingUnit* unit : {&norm, &layer}) {
    unit->Gather();
    unit->ReduceGradients(Filled(64, fine));
    unit->Release();
  }
  for (const float g : norm.LocalGradient()->ToFloatVector()) {
    BOOST_TEST(g == fine);
  }
  for (const float g : layer.LocalGradient()->ToFloatVector()) {
    BOOST_TEST(g == 1.0f);
  }
  // Clipping spans both units: the norm is over every shard, whatever their unit's policy.
  const double norm_of_all = model.GradNorm();
  const double expected = std::sqrt(64.0 * fine * fine + 64.0 * 1.0);
  BOOST_CHECK_CLOSE_FRACTION(norm_of_all, expected, 1e-6);
}

BOOST_AUTO_TEST_CASE(TheBufferCacheIsSizedByEachUnitsOwnDtypes) {
  auto group = mlfw_test::WorldGroup();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  fsdp::FSDP model(group, {.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16});
  auto& norm = model.RegisterUnit("norm", Filled(1024, 1.0f), kFp32);
  const std::size_t padded = norm.PaddedSize();
  const std::size_t shard = padded / world;
  // Gathered FP32 buffer + FP32 flat gradients + FP32 scratch shards, not the BF16 sizes.
  BOOST_TEST(model.CachedBufferLimit() == padded * (4 + 4) + shard * (4 + 4));
}

BOOST_AUTO_TEST_CASE(AnInvalidPolicyIsRefusedByFieldAndRegistersNothing) {
  fsdp::FSDP model(mlfw_test::WorldGroup());
  const auto bad = static_cast<DataType>(99);
  BOOST_CHECK_EXCEPTION(model.RegisterUnit("norm", Filled(64, 1.0f), {.ParamDType = bad, .ReduceDType = {}}),
                        mlframework::ArgumentError, [](const mlframework::ArgumentError& e) {
                          return e.Parameter() == "precision.ParamDType" &&
                                 std::string(e.what()).find("99") != std::string::npos;
                        });
  BOOST_CHECK_EXCEPTION(model.RegisterUnit("norm", Filled(64, 1.0f), {.ParamDType = {}, .ReduceDType = bad}),
                        mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) { return e.Parameter() == "precision.ReduceDType"; });
  BOOST_TEST(model.UnitCount() == 0u);
  model.RegisterUnit("norm", Filled(64, 1.0f), kFp32);  // still usable
  BOOST_TEST(model.UnitCount() == 1u);
}

BOOST_AUTO_TEST_CASE(RanksThatDisagreeOnAPolicyFailTogether) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: no second rank to disagree with (covered under mpiexec -n 2 and -n 4)");
    return;
  }
  fsdp::FSDP model(group);
  const fsdp::UnitPrecision mine = group->Rank() == 0 ? kFp32 : fsdp::UnitPrecision{};
  BOOST_CHECK_EXCEPTION(
      model.RegisterUnit("norm", Filled(64, 1.0f), mine), mlframework::ArgumentError,
      [](const mlframework::ArgumentError& e) { return std::string(e.what()).find("precision") != std::string::npos; });
  BOOST_TEST(model.UnitCount() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
