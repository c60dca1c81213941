// The recipes' casts through core's FP8 kernels: Quantize() casts with the tensor's scale and
// records the input's amax (the largest of a step's casts), CurrentScaling scales from the
// cast's own amax, Dequantize() decodes with scale_inv, and bad arguments are named.
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <mlframework/core/Float8.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>

#include "core/UserTensor.hpp"
#include "fp8/RecipeTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::fp8;
using mlfw_test::Bits;
using mlfw_test::ValueOf;

namespace {

using Names = std::vector<std::string>;
using List = std::vector<TensorPtr>;

// The saturating scaled cast of one value (Transformer Engine's cast) as the reference.
std::uint8_t CastBits(float x, float scale, DataType type) {
  const float max = type == DataType::Float8E4M3FN ? 448.0f : 57344.0f;
  const float product = x * scale;
  const float clamped = std::isnan(product) ? product : std::fmax(-max, std::fmin(max, product));
  return type == DataType::Float8E4M3FN ? Float8E4M3FN(clamped).bits : Float8E5M2(clamped).bits;
}

std::vector<std::uint8_t> BytesOf(const ITensor& tensor) {
  const auto bytes = tensor.HostBytes();
  return {reinterpret_cast<const std::uint8_t*>(bytes.data()),
          reinterpret_cast<const std::uint8_t*>(bytes.data()) + bytes.size()};
}

bool Says(const ArgumentError& e, const std::string& needle) {
  BOOST_TEST_MESSAGE(e.what());
  return std::string(e.what()).find(needle) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(RecipeQuantize)

BOOST_AUTO_TEST_CASE(DelayedQuantizeUsesTheScaleAndRecordsTheAmax) {
  DelayedScaling recipe({.Margin = 0, .Fp8Format = Format::HYBRID, .AmaxHistoryLen = 2});
  const TensorPtr w = FromVector({0.5f, -3.0f, 1.25f, 2.0f}, {2, 2});
  const TensorPtr g = FromVector({1e-3f, -4e-3f, 2e-5f}, {3}, DataType::BFloat16);
  recipe.Register("w", TensorRole::Forward, *w);
  recipe.Register("g", TensorRole::Gradient, *g);
  const TensorPtr w8 = Zeros({2, 2}, DataType::Float8E4M3FN);
  const TensorPtr g8 = Zeros({3}, DataType::Float8E5M2);

  // Step 1: scale 1; the amaxes are recorded.
  recipe.Quantize(Names{"w", "g"}, List{w, g}, List{w8, g8});
  BOOST_TEST(ValueOf(recipe.Amax("w")) == 3.0f);
  BOOST_TEST(ValueOf(recipe.Amax("g")) == g->ToFloatVector()[1] * -1.0f);
  BOOST_TEST((w8->ToFloatVector() == std::vector<float>{0.5f, -3.0f, 1.25f, 2.0f}));
  recipe.UpdateScales();
  const float w_scale = 448.0f / 3.0f;
  const float g_scale = 57344.0f / std::fabs(g->ToFloatVector()[1]);
  BOOST_TEST(Bits(ValueOf(recipe.Scale("w"))) == Bits(w_scale));
  BOOST_TEST(Bits(ValueOf(recipe.Scale("g"))) == Bits(g_scale));

  // Step 2: the cast uses the new scales, bit for bit as the reference cast; quantizing twice in
  // a step (here in reverse order, two runs) records the larger amax.
  recipe.Quantize(Names{"g", "w"}, List{g, w}, List{g8, w8});
  const TensorPtr w_big = FromVector({10.0f, 0.0f, 0.0f, -1.0f}, {2, 2});
  const TensorPtr w8_big = Zeros({2, 2}, DataType::Float8E4M3FN);
  recipe.Quantize(Names{"w"}, List{w_big}, List{w8_big});
  BOOST_TEST(ValueOf(recipe.Amax("w")) == 10.0f);
  std::vector<std::uint8_t> want;
  for (const float x : w->ToFloatVector()) want.push_back(CastBits(x, w_scale, DataType::Float8E4M3FN));
  BOOST_TEST(BytesOf(*w8) == want, boost::test_tools::per_element());
  want.clear();
  for (const float x : w_big->ToFloatVector()) want.push_back(CastBits(x, w_scale, DataType::Float8E4M3FN));
  BOOST_TEST(BytesOf(*w8_big) == want, boost::test_tools::per_element());  // 10 * 149.3 saturates to 448
  want.clear();
  for (const float x : g->ToFloatVector()) want.push_back(CastBits(x, g_scale, DataType::Float8E5M2));
  BOOST_TEST(BytesOf(*g8) == want, boost::test_tools::per_element());

  // Dequantize: the FP8 value times scale_inv.
  const TensorPtr back = Zeros({2, 2});
  recipe.Dequantize(Names{"w"}, List{w8}, List{back});
  const std::vector<float> decoded = w8->ToFloatVector();
  const std::vector<float> got = back->ToFloatVector();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == decoded[i] * (1.0f / w_scale));

  recipe.UpdateScales();  // history {3, 10}: max 10
  BOOST_TEST(Bits(ValueOf(recipe.Scale("w"))) == Bits(448.0f / 10.0f));
}

BOOST_AUTO_TEST_CASE(NonFiniteInputsRecordANonFiniteAmaxAndKeepTheScale) {
  DelayedScaling recipe({.AmaxHistoryLen = 1, .AmaxComputeAlgo = AmaxComputeAlgorithm::MostRecent});
  const TensorPtr x = FromVector({1.0f, 2.0f}, {2});
  recipe.Register("x", TensorRole::Forward, *x);
  const TensorPtr x8 = Zeros({2}, DataType::Float8E4M3FN);
  recipe.Quantize(Names{"x"}, List{x}, List{x8});
  recipe.UpdateScales();
  BOOST_TEST(ValueOf(recipe.Scale("x")) == 224.0f);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const TensorPtr poisoned = FromVector({bad, 2.0f}, {2});
    recipe.Quantize(Names{"x"}, List{poisoned}, List{x8});
    BOOST_TEST(!std::isfinite(ValueOf(recipe.Amax("x"))));
    recipe.UpdateScales();
    BOOST_TEST(ValueOf(recipe.Scale("x")) == 224.0f);
  }
}

BOOST_AUTO_TEST_CASE(CurrentScalingScalesFromTheCastsOwnAmax) {
  CurrentScaling recipe;  // HYBRID
  const TensorPtr a = FromVector({4.0f, -1.0f}, {2}, DataType::Float16);
  const TensorPtr b = FromVector({0.0f, 0.0f, 0.0f}, {3});
  const TensorPtr dy = FromVector({7.0f}, {1});
  recipe.Register("a", TensorRole::Forward, *a);
  recipe.Register("b", TensorRole::Forward, *b);
  recipe.Register("dy", TensorRole::Gradient, *dy);
  const TensorPtr a8 = Zeros({2}, DataType::Float8E4M3FN);
  const TensorPtr b8 = Zeros({3}, DataType::Float8E4M3FN);
  const TensorPtr dy8 = Zeros({1}, DataType::Float8E5M2);
  recipe.Quantize(Names{"a", "b", "dy"}, List{a, b, dy}, List{a8, b8, dy8});
  BOOST_TEST(ValueOf(recipe.Scale("a")) == 112.0f);  // 448 / 4
  BOOST_TEST(ValueOf(recipe.Scale("b")) == 1.0f);    // amax 0: scale 1
  BOOST_TEST(Bits(ValueOf(recipe.Scale("dy"))) == Bits(57344.0f / 7.0f));
  BOOST_TEST(ValueOf(recipe.Amax("a")) == 4.0f);
  BOOST_TEST((a8->ToFloatVector() == std::vector<float>{448.0f, -112.0f}));
  BOOST_TEST(BytesOf(*dy8)[0] == CastBits(7.0f, 57344.0f / 7.0f, DataType::Float8E5M2));
  // A later cast of "a" alone rescales "a" only.
  const TensorPtr a_small = FromVector({0.5f, 0.25f}, {2}, DataType::Float16);
  recipe.Quantize(Names{"a"}, List{a_small}, List{a8});
  BOOST_TEST(ValueOf(recipe.Scale("a")) == 896.0f);
  BOOST_TEST(Bits(ValueOf(recipe.Scale("dy"))) == Bits(57344.0f / 7.0f));
  recipe.UpdateScales();  // nothing to advance
  BOOST_TEST(ValueOf(recipe.Scale("a")) == 896.0f);
  const TensorPtr back = Zeros({2}, DataType::BFloat16);
  recipe.Dequantize(Names{"a"}, List{a8}, List{back});
  BOOST_TEST((back->ToFloatVector() == std::vector<float>{0.5f, 0.25f}));
  // A tiny amax: the quotient overflows, the scale is FLT_MAX.
  const TensorPtr tiny = FromVector({1e-42f, 0.0f}, {2});
  recipe.Quantize(Names{"a"}, List{tiny}, List{a8});
  BOOST_TEST(ValueOf(recipe.Scale("a")) == FLT_MAX);
}

BOOST_AUTO_TEST_CASE(BadInputIsNamedAndChangesNothing) {
  DelayedScaling recipe({.Fp8Format = Format::HYBRID});
  const TensorPtr w = FromVector({1.0f, 2.0f}, {2});
  recipe.Register("w", TensorRole::Forward, *w);
  recipe.Register("g", TensorRole::Gradient, *w);
  const TensorPtr w8 = Zeros({2}, DataType::Float8E4M3FN);
  const std::vector<std::byte> before = recipe.StateDict();
  // A BF16 destination (a recipe on a BF16 tensor).
  BOOST_CHECK_EXCEPTION(recipe.Quantize(Names{"w"}, List{w}, List{Zeros({2}, DataType::BFloat16)}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'dst[0]': is BFloat16"); });
  // An FP8 source.
  BOOST_CHECK_EXCEPTION(recipe.Quantize(Names{"w"}, List{w8}, List{w8}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'src[0]': is Float8E4M3FN"); });
  // The wrong FP8 type for the role (E4M3 for a HYBRID gradient).
  BOOST_CHECK_EXCEPTION(recipe.Quantize(Names{"w", "g"}, List{w, w}, List{w8, w8}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'dst[1]': is Float8E4M3FN; tensor 'g'"); });
  // Unknown names, in Quantize and in the accessors.
  BOOST_CHECK_EXCEPTION(recipe.Quantize(Names{"w", "bias"}, List{w, w}, List{w8, w8}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'names[1]': 'bias' is not a registered"); });
  BOOST_CHECK_EXCEPTION(recipe.Scale("bias"), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'bias' is not a registered"); });
  // Counts, sizes, nulls.
  BOOST_CHECK_THROW(recipe.Quantize(Names{"w"}, List{w, w}, List{w8}), ArgumentError);
  BOOST_CHECK_THROW(recipe.Quantize(Names{"w"}, List{w}, List{Zeros({3}, DataType::Float8E4M3FN)}), ArgumentError);
  BOOST_CHECK_THROW(recipe.Quantize(Names{"w"}, List{nullptr}, List{w8}), ArgumentNullError);
  BOOST_CHECK_EXCEPTION(recipe.Dequantize(Names{"w"}, List{w}, List{w}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'src[0]': is Float32"); });
  // Registration.
  BOOST_CHECK_EXCEPTION(recipe.Register("w", TensorRole::Forward, *w), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'w' is already registered"); });
  BOOST_CHECK_THROW(recipe.Register("", TensorRole::Forward, *w), ArgumentError);
  BOOST_TEST((recipe.StateDict() == before));
  BOOST_TEST(w8->ToFloatVector() == std::vector<float>(2, 0.0f), boost::test_tools::per_element());
  // Configurations.
  BOOST_CHECK_EXCEPTION(DelayedScaling({.AmaxHistoryLen = 0}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'config.AmaxHistoryLen': is 0"); });
  // H + 4 state rows wrap around for the largest lengths: Register() would write outside the state.
  BOOST_CHECK_EXCEPTION(DelayedScaling({.AmaxHistoryLen = std::numeric_limits<std::size_t>::max()}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'config.AmaxHistoryLen'"); });
  BOOST_CHECK_EXCEPTION(DelayedScaling({.Margin = -1}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'config.Margin'"); });
  BOOST_CHECK_EXCEPTION(DelayedScaling({.Fp8Format = static_cast<Format>(7)}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'config.Fp8Format'"); });
  BOOST_CHECK_EXCEPTION(CurrentScaling({.Fp8Format = static_cast<Format>(9)}), ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'config.Fp8Format'"); });
}

BOOST_AUTO_TEST_CASE(ATensorTheKernelsCannotReachFailsTheCallBeforeAnyRunIsCast) {
  // A list in another order than the registration is cast run by run; a tensor without a backend
  // or host-addressable elements (a framework's device tensor reported as CPU) passes the name,
  // dtype, size and device checks but not the kernels', so it must fail the call before the
  // earlier runs cast, record their amax or (CurrentScaling) rescale.
  const auto unreachable = std::make_shared<mlframework::testing::UserTensor>(
      std::vector<float>{1.0f, 2.0f}, DataType::Float32, mlframework::testing::Mode::Defaults, false);
  const TensorPtr a = FromVector({3.0f, -5.0f}, {2});
  DelayedScaling delayed({.Fp8Format = Format::E4M3});
  CurrentScaling current({.Fp8Format = Format::E4M3});
  for (IScalingRecipe* recipe : {static_cast<IScalingRecipe*>(&delayed), static_cast<IScalingRecipe*>(&current)}) {
    BOOST_TEST_CONTEXT(recipe->Name()) {
      recipe->Register("a", TensorRole::Forward, *a);
      recipe->Register("b", TensorRole::Forward, *a);
      const std::vector<std::byte> before = recipe->StateDict();
      const TensorPtr a8 = Zeros({2}, DataType::Float8E4M3FN);
      const TensorPtr b8 = Zeros({2}, DataType::Float8E4M3FN);
      BOOST_CHECK_EXCEPTION(recipe->Quantize(Names{"b", "a"}, List{a, unreachable}, List{b8, a8}), ArgumentError,
                            [](const ArgumentError& e) { return Says(e, "src[1]"); });
      BOOST_TEST((recipe->StateDict() == before));
      BOOST_TEST(ValueOf(recipe->Amax("b")) == 0.0f);
      BOOST_TEST(ValueOf(recipe->Scale("b")) == 1.0f);
      BOOST_TEST(BytesOf(*b8) == std::vector<std::uint8_t>(2, 0), boost::test_tools::per_element());
      // Dequantize checks the same way: nothing decoded into the first destination.
      const TensorPtr back = FromVector({7.0f, 7.0f}, {2});
      BOOST_CHECK_THROW(recipe->Dequantize(Names{"b", "a"}, List{b8, a8}, List{back, unreachable}), ArgumentError);
      BOOST_TEST((back->ToFloatVector() == std::vector<float>{7.0f, 7.0f}));
    }
  }
}

BOOST_AUTO_TEST_CASE(AShapeTheKernelsRefuseFailsTheCallBeforeAnyRunIsCast) {
  // The FP8 kernels take pairs of one shape; a pair of equal size but another shape in a later
  // run must fail the whole call up front, naming the caller's index, not after the earlier runs
  // were cast, recorded their amax or (CurrentScaling) rescaled.
  const TensorPtr flat = FromVector({3.0f, -5.0f, 1.0f, 2.0f}, {4});
  const TensorPtr square = FromVector({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  DelayedScaling delayed({.Fp8Format = Format::E4M3});
  CurrentScaling current({.Fp8Format = Format::E4M3});
  for (IScalingRecipe* recipe : {static_cast<IScalingRecipe*>(&delayed), static_cast<IScalingRecipe*>(&current)}) {
    BOOST_TEST_CONTEXT(recipe->Name()) {
      recipe->Register("a", TensorRole::Forward, *flat);
      recipe->Register("b", TensorRole::Forward, *flat);
      const std::vector<std::byte> before = recipe->StateDict();
      const TensorPtr a8 = Zeros({4}, DataType::Float8E4M3FN);
      const TensorPtr b8 = Zeros({4}, DataType::Float8E4M3FN);
      BOOST_CHECK_EXCEPTION(recipe->Quantize(Names{"b", "a"}, List{flat, square}, List{b8, a8}), ArgumentError,
                            [](const ArgumentError& e) { return Says(e, "'dst[1]'"); });
      BOOST_TEST((recipe->StateDict() == before));
      BOOST_TEST(BytesOf(*b8) == std::vector<std::uint8_t>(4, 0), boost::test_tools::per_element());
      // Dequantize: nothing decoded into the first destination.
      recipe->Quantize(Names{"a", "b"}, List{flat, flat}, List{a8, b8});
      const TensorPtr back = FromVector({7.0f, 7.0f, 7.0f, 7.0f}, {4});
      BOOST_CHECK_EXCEPTION(recipe->Dequantize(Names{"b", "a"}, List{b8, a8}, List{back, Zeros({2, 2})}), ArgumentError,
                            [](const ArgumentError& e) { return Says(e, "'dst[1]'"); });
      BOOST_TEST((back->ToFloatVector() == std::vector<float>(4, 7.0f)));
    }
  }
}

BOOST_AUTO_TEST_CASE(CurrentScalingRefusesANameTwiceInOneCall) {
  // Each cast of CurrentScaling sets the name's scale from its own amax: a second cast of the
  // same name in one call would replace the scale the first destination was cast with, and its
  // decode would use the wrong scale_inv. The call is refused, naming both indices.
  CurrentScaling recipe({.Fp8Format = Format::E4M3});
  const TensorPtr big = FromVector({4.0f, -2.0f}, {2});
  const TensorPtr small = FromVector({0.5f, 0.25f}, {2});
  recipe.Register("a", TensorRole::Forward, *big);
  recipe.Register("b", TensorRole::Forward, *big);
  const std::vector<std::byte> before = recipe.StateDict();
  const TensorPtr a8 = Zeros({2}, DataType::Float8E4M3FN);
  const TensorPtr b8 = Zeros({2}, DataType::Float8E4M3FN);
  const TensorPtr again8 = Zeros({2}, DataType::Float8E4M3FN);
  BOOST_CHECK_EXCEPTION(recipe.Quantize(Names{"a", "b", "a"}, List{big, big, small}, List{a8, b8, again8}),
                        ArgumentError,
                        [](const ArgumentError& e) { return Says(e, "'names[2]': 'a' is also names[0]"); });
  BOOST_TEST((recipe.StateDict() == before));
  for (const TensorPtr& out : {a8, b8, again8}) {
    BOOST_TEST(BytesOf(*out) == std::vector<std::uint8_t>(2, 0), boost::test_tools::per_element());
  }
  // DelayedScaling casts a name with one scale however often it appears: allowed, and the
  // recorded amax is the largest of the casts.
  DelayedScaling delayed({.Fp8Format = Format::E4M3});
  delayed.Register("a", TensorRole::Forward, *big);
  delayed.Quantize(Names{"a", "a"}, List{small, big}, List{a8, again8});
  BOOST_TEST(ValueOf(delayed.Amax("a")) == 4.0f);
  // Dequantize takes a name twice under either recipe (one scale_inv).
  recipe.Quantize(Names{"a"}, List{big}, List{a8});
  const TensorPtr back1 = Zeros({2});
  const TensorPtr back2 = Zeros({2});
  recipe.Dequantize(Names{"a", "a"}, List{a8, a8}, List{back1, back2});
  BOOST_TEST((back2->ToFloatVector() == std::vector<float>{4.0f, -2.0f}));
}

BOOST_AUTO_TEST_CASE(AFrameworksOwnHostTensorsQuantize) {
  // A tensor without a backend whose host bytes are its elements: its state lives on the CPU and
  // core's kernels run on its memory.
  const auto user = std::make_shared<mlframework::testing::UserTensor>(
      std::vector<float>{2.0f, -8.0f}, DataType::BFloat16, mlframework::testing::Mode::Defaults, true);
  DelayedScaling recipe({.AmaxHistoryLen = 1});
  recipe.Register("u", TensorRole::Forward, *user);
  BOOST_TEST(recipe.Scale("u")->GetDevice() == Device::CPU());
  const TensorPtr u8 = Zeros({2}, DataType::Float8E4M3FN);
  recipe.Quantize(Names{"u"}, List{user}, List{u8});
  BOOST_TEST(ValueOf(recipe.Amax("u")) == 8.0f);
  recipe.UpdateScales();
  BOOST_TEST(ValueOf(recipe.Scale("u")) == 56.0f);
  recipe.Quantize(Names{"u"}, List{user}, List{u8});
  BOOST_TEST((u8->ToFloatVector() == std::vector<float>{112.0f, -448.0f}));
}

BOOST_AUTO_TEST_CASE(TheReadmeLoopRuns) {
  namespace fp8 = mlframework::fp8;
  const TensorPtr weight = FromVector({0.25f, -0.75f, 1.5f}, {3}, DataType::BFloat16);
  const TensorPtr grad_out = FromVector({1e-4f, 2e-4f}, {2}, DataType::BFloat16);
  fp8::DelayedScaling recipe({.Margin = 0, .Fp8Format = fp8::Format::HYBRID, .AmaxHistoryLen = 16});
  recipe.Register("fc1.weight", fp8::TensorRole::Forward, *weight);
  recipe.Register("fc1.grad_out", fp8::TensorRole::Gradient, *grad_out);
  auto w8 = mlframework::Zeros(weight->GetShape(), recipe.Float8TypeOf("fc1.weight"), weight->GetDevice());
  for (int step = 0; step < 3; ++step) {
    recipe.Quantize(std::vector<std::string>{"fc1.weight"}, std::vector{weight}, std::vector{w8});
    recipe.UpdateScales();
  }
  BOOST_TEST(Bits(ValueOf(recipe.Scale("fc1.weight"))) == Bits(448.0f / 1.5f));
  BOOST_TEST(ValueOf(recipe.Scale("fc1.grad_out")) == 1.0f);
  BOOST_TEST(recipe.StateDict().size() > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
