// Moved-from objects (issue 38): every public movable class either keeps working after a move
// (its move is a copy) or throws InvalidOperationError naming the class on use, never
// dereferences null. The destructor and assigning a live object into a moved-from one keep
// working. Classes that cannot be moved are pinned as such, so a move added later comes here.
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/OverflowLogger.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TrainingCsvWriter.hpp>
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/fp8/MXFP8BlockScaling.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

// The message of the InvalidOperationError a moved-from @p owner throws.
void ExpectMovedFrom(const std::function<void()>& call, const std::string& owner) {
  ++mlframework::testing::BadInputCount();
  try {
    call();
  } catch (const InvalidOperationError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find(owner + " was moved from") != std::string::npos, message);
    return;
  } catch (const std::exception& other) {
    BOOST_ERROR("expected InvalidOperationError, got " << typeid(other).name() << ": " << other.what());
    return;
  }
  BOOST_ERROR("a call on a moved-from " << owner << " threw nothing");
}

GradientMap Fp16Gradients() {
  return {{"a", FromVector({1.0f, 2.0f}, {2}, DataType::Float16)}, {"b", FromVector({3.0f}, {1})}};
}

// Every member of a moved-from FP8 recipe throws; the object it was moved into has the state.
template <typename Recipe>
void CheckRecipe(const std::string& name) {
  Recipe recipe;
  recipe.Register("w", fp8::TensorRole::Forward, *Zeros({4}));
  const std::vector<std::byte> before = recipe.StateDict();
  Recipe moved(std::move(recipe));
  BOOST_TEST(moved.IsRegistered("w"));
  BOOST_TEST((moved.StateDict() == before));

  const std::vector<std::string> names{"w"};
  const std::vector<TensorPtr> src{FromVector({1.0f, 2.0f, 3.0f, 4.0f}, {4})};
  const std::vector<TensorPtr> dst{Zeros({4}, DataType::Float8E4M3FN)};
  // NOLINTBEGIN(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the point of the test
  ExpectMovedFrom([&] { recipe.Register("x", fp8::TensorRole::Forward, *Zeros({1})); }, name);
  ExpectMovedFrom([&] { (void)recipe.IsRegistered("w"); }, name);
  ExpectMovedFrom([&] { (void)recipe.Names(); }, name);
  ExpectMovedFrom([&] { (void)recipe.Float8TypeOf("w"); }, name);
  ExpectMovedFrom([&] { recipe.Quantize(names, src, dst); }, name);
  ExpectMovedFrom([&] { recipe.Dequantize(names, dst, src); }, name);
  ExpectMovedFrom([&] { recipe.UpdateScales(); }, name);
  ExpectMovedFrom([&] { (void)recipe.Scale("w"); }, name);
  ExpectMovedFrom([&] { (void)recipe.ScaleInv("w"); }, name);
  ExpectMovedFrom([&] { (void)recipe.Amax("w"); }, name);
  ExpectMovedFrom([&] { (void)recipe.StateDict(); }, name);
  ExpectMovedFrom([&] { recipe.LoadStateDict(before); }, name);
  BOOST_TEST(recipe.Name() == name);

  // Assigning a live recipe brings the moved-from one back.
  recipe = std::move(moved);
  BOOST_TEST(recipe.IsRegistered("w"));
  BOOST_TEST((recipe.StateDict() == before));
  // NOLINTEND(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
}

// A class whose move is a copy: the moved-from object keeps its state and keeps working.
template <typename Object, typename Use>
void CheckMoveKeepsSource(Object& object, Use&& use) {
  const std::vector<std::byte> before = object.StateDict();
  Object moved(std::move(object));
  // NOLINTBEGIN(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the point of the test
  BOOST_TEST((object.StateDict() == before));
  BOOST_TEST((moved.StateDict() == before));
  use(object);
  Object assigned;
  assigned = std::move(object);
  use(object);
  // NOLINTEND(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
}

}  // namespace

BOOST_AUTO_TEST_SUITE(MovedFromBadInput)

BOOST_AUTO_TEST_CASE(Fp8RecipesThrowOnceMovedFrom) {
  CheckRecipe<fp8::DelayedScaling>("DelayedScaling");
  CheckRecipe<fp8::CurrentScaling>("CurrentScaling");
  fp8::DelayedScaling target;
  {
    fp8::DelayedScaling source;
    target = std::move(source);
  }  // the moved-from source is destroyed here
  target.Register("w", fp8::TensorRole::Forward, *Zeros({1}));
  BOOST_TEST(target.IsRegistered("w"));
}

BOOST_AUTO_TEST_CASE(GradientConversionLayerThrowsOnceMovedFrom) {
  mp::GradientConversionLayer layer;
  (void)layer.ProcessGradients(Fp16Gradients());
  const std::vector<std::byte> before = layer.StateDict();
  mp::GradientConversionLayer moved(std::move(layer));
  BOOST_TEST((moved.StateDict() == before));

  const std::string name = "GradientConversionLayer";
  // NOLINTBEGIN(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the point of the test
  ExpectMovedFrom([&] { (void)layer.CurrentScale(); }, name);
  ExpectMovedFrom([&] { (void)layer.LossScaler(); }, name);
  ExpectMovedFrom([&] { (void)layer.Precision(); }, name);
  ExpectMovedFrom([&] { (void)layer.ProcessGradients(Fp16Gradients()); }, name);
  ExpectMovedFrom([&] { (void)layer.ScaleLoss(Scalar(1.0f)); }, name);
  ExpectMovedFrom([&] { layer.SetAmaxTracking(true); }, name);
  ExpectMovedFrom([&] { (void)layer.GetStats(); }, name);
  ExpectMovedFrom([&] { layer.Reset(); }, name);
  ExpectMovedFrom([&] { (void)layer.StateDict(); }, name);
  ExpectMovedFrom([&] { layer.LoadStateDict(before); }, name);

  layer = std::move(moved);
  BOOST_TEST((layer.StateDict() == before));
  BOOST_TEST(layer.CurrentScale() > 0.0f);
  // NOLINTEND(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
}

BOOST_AUTO_TEST_CASE(CsvWriterThrowsOnceMovedFrom) {
  std::vector<std::string> lines;
  TrainingCsvWriter writer([&](std::string_view line) { lines.emplace_back(line); });
  TrainingCsvWriter moved(std::move(writer));
  StepEvent event;
  event.Step = 3;
  event.LossScale = 2.0f;
  // NOLINTNEXTLINE(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the point of the test
  ExpectMovedFrom([&] { writer.OnStep(event); }, "TrainingCsvWriter");
  moved.OnStep(event);
  BOOST_TEST(lines.size() == 2U);  // the header and the moved writer's row
  BOOST_TEST(moved.RowsWritten() == 1);
}

BOOST_AUTO_TEST_CASE(ScalersAndManagersWhoseMoveIsACopyKeepWorking) {
  amp::StaticLossScaler fixed(256.0f);
  CheckMoveKeepsSource(fixed, [](amp::StaticLossScaler& s) {
    BOOST_TEST(s.CurrentScale() == 256.0f);
    BOOST_TEST(!s.UnscaleGradientsAndCheck(Fp16Gradients()).Overflow);
  });
  amp::DynamicLossScaler dynamic({.InitialScale = 1024.0f});
  dynamic.UpdateScale(true);
  CheckMoveKeepsSource(
      dynamic, [](amp::DynamicLossScaler& s) { BOOST_TEST(!s.UnscaleGradientsAndCheck(Fp16Gradients()).Overflow); });
  mp::DynamicLossScaler mixed;
  (void)mixed.UpdateScale(true);
  CheckMoveKeepsSource(mixed, [](mp::DynamicLossScaler& s) { BOOST_TEST(!s.CheckOverflow(Fp16Gradients())); });
  mp::PrecisionManager precision;
  CheckMoveKeepsSource(precision, [](mp::PrecisionManager& p) {
    BOOST_TEST((p.ConvertToFP32(Fp16Gradients()).at("a")->GetDataType() == DataType::Float32));
  });
}

// Value types without a move of their own: a "move" copies them.
static_assert(std::is_trivially_copyable_v<fp8::MXFP8BlockScaling>);
static_assert(std::is_copy_constructible_v<distributed::LocalProcessGroup>);

// These own threads, devices, registered units or a single scale state: not movable, so no
// moved-from state exists. A move added to one of them must come with the checks above.
static_assert(!std::is_move_constructible_v<optimizers::SGD> && !std::is_move_assignable_v<optimizers::SGD>);
static_assert(!std::is_move_constructible_v<optimizers::Adam> && !std::is_move_assignable_v<optimizers::Adam>);
static_assert(!std::is_move_constructible_v<fsdp::FSDP> && !std::is_move_assignable_v<fsdp::FSDP>);
static_assert(!std::is_move_constructible_v<fsdp::FSDPShardingUnit>);
static_assert(!std::is_move_constructible_v<fsdp::FSDPMixedPrecisionManager>);
static_assert(!std::is_move_constructible_v<fsdp::FSDPAmpIntegration>);
static_assert(!std::is_move_constructible_v<distributed::MpiProcessGroup>);
static_assert(!std::is_move_constructible_v<distributed::AbortGuard>);
static_assert(!std::is_move_constructible_v<OverflowLogger>);

BOOST_AUTO_TEST_SUITE_END()
