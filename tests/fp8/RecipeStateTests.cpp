// StateDict / LoadStateDict of the FP8 recipes: save -> load -> continue equals the
// uninterrupted run, the blob's size does not grow, and a corrupt or mismatched blob is an
// ArgumentError naming what differs, with the state unchanged.
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>

#include "fp8/RecipeTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::fp8;
using mlfw_test::Bits;
using mlfw_test::ValueOf;

namespace {

const DelayedScalingConfig kConfig{
    .Margin = 2, .Fp8Format = Format::HYBRID, .AmaxHistoryLen = 5, .AmaxComputeAlgo = AmaxComputeAlgorithm::Max};

DelayedScaling MakeRecipe(const DelayedScalingConfig& config = kConfig) {
  DelayedScaling recipe(config);
  recipe.Register("layer0.weight", TensorRole::Forward, *Zeros({1}));
  recipe.Register("layer0.input", TensorRole::Forward, *Zeros({1}));
  recipe.Register("layer0.grad_output", TensorRole::Gradient, *Zeros({1}));
  return recipe;
}

// Step @p step of a recorded run: an amax per tensor (a NaN and an Inf among them), then the update.
void RunStep(DelayedScaling& recipe, int step) {
  const float base = 0.5f + 0.37f * static_cast<float>(step % 7);
  mlfw_test::RecordAmax(recipe, "layer0.weight", base);
  mlfw_test::RecordAmax(recipe, "layer0.input",
                        step == 4 ? std::numeric_limits<float>::infinity() : base * 3.0f + 1.0f);
  mlfw_test::RecordAmax(recipe, "layer0.grad_output",
                        step == 6 ? std::numeric_limits<float>::quiet_NaN() : 1e-3f * static_cast<float>(step + 1));
  recipe.UpdateScales();
}

std::vector<std::uint32_t> ScaleBits(const IScalingRecipe& recipe) {
  std::vector<std::uint32_t> bits;
  for (const std::string& name : recipe.Names()) {
    bits.push_back(Bits(ValueOf(recipe.Scale(name))));
    bits.push_back(Bits(ValueOf(recipe.ScaleInv(name))));
  }
  return bits;
}

// The blob's payload re-framed: @p edit changes the payload (or the kind/version) and the
// checksum is recomputed, so the error comes from the field, not the checksum.
std::vector<std::byte> Reframed(const std::vector<std::byte>& blob,
                                const std::function<void(std::vector<std::byte>&)>& edit) {
  std::vector<std::byte> body(blob.begin(), blob.end() - 8);
  edit(body);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::byte b : body) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  for (int i = 0; i < 8; ++i) body.push_back(static_cast<std::byte>((hash >> (8 * i)) & 0xffU));
  return body;
}

// Offset of the payload in a blob of kind "fp8.DelayedScaling".
constexpr std::size_t kPayload = 4 + 2 + 2 + 2 + sizeof("fp8.DelayedScaling") - 1 + 8;

void ExpectRejected(DelayedScaling& recipe, const std::vector<std::byte>& blob, const std::string& needle) {
  const std::vector<std::byte> before = recipe.StateDict();
  BOOST_CHECK_EXCEPTION(recipe.LoadStateDict(blob), ArgumentError, [&](const ArgumentError& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).find(needle) != std::string::npos;
  });
  BOOST_TEST((recipe.StateDict() == before));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(RecipeState)

BOOST_AUTO_TEST_CASE(SaveLoadContinueEqualsTheUninterruptedRun) {
  DelayedScaling uninterrupted = MakeRecipe();
  DelayedScaling first = MakeRecipe();
  for (int step = 0; step < 8; ++step) {
    RunStep(uninterrupted, step);
    RunStep(first, step);
  }
  mlfw_test::RecordAmax(first, "layer0.weight", 9.0f);  // mid-step: the current amax is saved too
  mlfw_test::RecordAmax(uninterrupted, "layer0.weight", 9.0f);
  const std::vector<std::byte> saved = first.StateDict();
  DelayedScaling restored = MakeRecipe();
  restored.LoadStateDict(saved);
  BOOST_TEST((restored.StateDict() == saved));
  for (int step = 8; step < 20; ++step) {
    RunStep(uninterrupted, step);
    RunStep(restored, step);
    BOOST_TEST((ScaleBits(restored) == ScaleBits(uninterrupted)), "step " << step);
  }
  BOOST_TEST((restored.StateDict() == uninterrupted.StateDict()));
}

BOOST_AUTO_TEST_CASE(BlobSizeDoesNotGrowWithSaves) {
  DelayedScaling recipe = MakeRecipe();
  const std::size_t size = recipe.StateDict().size();
  // Frame (4 + 2 + 2 + 2 + kind + 8 + 8), config (8 + 1 + 8 + 1), count (8), and per tensor its
  // name (4 + length), role (1), history (5 * 4), scale and scale_inv (8).
  const std::size_t names = std::string("layer0.weight").size() + std::string("layer0.input").size() +
                            std::string("layer0.grad_output").size();
  BOOST_TEST(size == kPayload + 8 + 18 + 8 + std::size_t{3} * (4 + 1 + 20 + 8) + names);
  for (int round = 0; round < 20; ++round) {
    RunStep(recipe, round);
    const std::vector<std::byte> blob = recipe.StateDict();
    BOOST_TEST(blob.size() == size);
    recipe.LoadStateDict(blob);
    BOOST_TEST(recipe.StateDict().size() == size);
  }
}

BOOST_AUTO_TEST_CASE(RegistrationOrderDoesNotMatterNamesDo) {
  DelayedScaling recipe = MakeRecipe();
  RunStep(recipe, 1);
  DelayedScaling reordered(kConfig);
  reordered.Register("layer0.grad_output", TensorRole::Gradient, *Zeros({1}));
  reordered.Register("layer0.weight", TensorRole::Forward, *Zeros({1}));
  reordered.Register("layer0.input", TensorRole::Forward, *Zeros({1}));
  reordered.LoadStateDict(recipe.StateDict());
  for (const std::string& name : recipe.Names()) {
    BOOST_TEST(Bits(ValueOf(reordered.Scale(name))) == Bits(ValueOf(recipe.Scale(name))));
    BOOST_TEST((reordered.AmaxHistory(name) == recipe.AmaxHistory(name)));
  }
}

BOOST_AUTO_TEST_CASE(MismatchedConfigurationsAreNamed) {
  DelayedScaling source = MakeRecipe();
  RunStep(source, 2);
  const std::vector<std::byte> blob = source.StateDict();

  DelayedScalingConfig longer = kConfig;
  longer.AmaxHistoryLen = 6;
  DelayedScaling other_history = MakeRecipe(longer);
  RunStep(other_history, 3);
  ExpectRejected(other_history, blob, "amax history length 5 differs from this recipe's 6");

  DelayedScalingConfig recent = kConfig;
  recent.AmaxComputeAlgo = AmaxComputeAlgorithm::MostRecent;
  DelayedScaling other_algo = MakeRecipe(recent);
  ExpectRejected(other_algo, blob, "amax_compute_algo max differs");

  DelayedScalingConfig margin = kConfig;
  margin.Margin = 0;
  DelayedScaling other_margin = MakeRecipe(margin);
  ExpectRejected(other_margin, blob, "margin 2 differs from this recipe's 0");

  DelayedScalingConfig e4m3 = kConfig;
  e4m3.Fp8Format = Format::E4M3;
  DelayedScaling other_format = MakeRecipe(e4m3);
  ExpectRejected(other_format, blob, "format HYBRID differs from this recipe's E4M3");
}

BOOST_AUTO_TEST_CASE(MismatchedNamesAndRolesAreNamed) {
  DelayedScaling source = MakeRecipe();
  RunStep(source, 2);
  const std::vector<std::byte> blob = source.StateDict();

  DelayedScaling renamed(kConfig);
  renamed.Register("layer0.weight", TensorRole::Forward, *Zeros({1}));
  renamed.Register("layer0.activation", TensorRole::Forward, *Zeros({1}));
  renamed.Register("layer0.grad_output", TensorRole::Gradient, *Zeros({1}));
  ExpectRejected(renamed, blob, "'layer0.input', which is not registered");

  DelayedScaling fewer(kConfig);
  fewer.Register("layer0.weight", TensorRole::Forward, *Zeros({1}));
  ExpectRejected(fewer, blob, "holds 3 tensors; this recipe has 1 registered");

  DelayedScaling roles(kConfig);
  roles.Register("layer0.weight", TensorRole::Forward, *Zeros({1}));
  roles.Register("layer0.input", TensorRole::Gradient, *Zeros({1}));
  roles.Register("layer0.grad_output", TensorRole::Gradient, *Zeros({1}));
  ExpectRejected(roles, blob, "'layer0.input' is Forward in the blob and Gradient here");
}

BOOST_AUTO_TEST_CASE(CorruptBlobsAreRejectedWithTheStateUnchanged) {
  DelayedScaling source = MakeRecipe();
  RunStep(source, 2);
  const std::vector<std::byte> blob = source.StateDict();
  DelayedScaling target = MakeRecipe();
  RunStep(target, 5);

  // Version: the u16 after the format version.
  ExpectRejected(target, Reframed(blob, [](std::vector<std::byte>& b) { b[6] = std::byte{2}; }),
                 "state version 2 of 'fp8.DelayedScaling' is not supported");
  // Another kind of blob.
  CurrentScaling current;
  ExpectRejected(target, current.StateDict(), "holds state of 'fp8.CurrentScaling'");
  // Truncated, padded, flipped.
  for (const std::size_t keep : {std::size_t{0}, std::size_t{10}, kPayload + 3, blob.size() - 9, blob.size() - 1}) {
    const std::vector<std::byte> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(keep));
    const std::vector<std::byte> before = target.StateDict();
    BOOST_CHECK_THROW(target.LoadStateDict(cut), ArgumentError);
    BOOST_TEST((target.StateDict() == before));
  }
  std::vector<std::byte> flipped = blob;
  flipped[kPayload + 20] ^= std::byte{0x10};
  ExpectRejected(target, flipped, "checksum mismatch");
  // A payload that ends early (the length field and checksum made consistent).
  ExpectRejected(target,
                 Reframed(blob,
                          [](std::vector<std::byte>& b) {
                            b.erase(b.end() - 4, b.end());
                            const std::uint64_t length = b.size() - kPayload;
                            for (int i = 0; i < 8; ++i) {
                              b[kPayload - 8 + static_cast<std::size_t>(i)] =
                                  static_cast<std::byte>((length >> (8 * i)) & 0xffU);
                            }
                          }),
                 "payload ends early");
}

BOOST_AUTO_TEST_CASE(InsaneValuesAreRejected) {
  DelayedScaling source = MakeRecipe();
  RunStep(source, 2);
  const std::vector<std::byte> blob = source.StateDict();
  DelayedScaling target = MakeRecipe();
  // The first entry: u64 count, u32 name length, name, u8 role, 5 history floats, scale, scale_inv.
  const std::size_t entry = kPayload + 8 + 1 + 8 + 1 + 8;
  const std::size_t history = entry + 4 + std::string("layer0.weight").size() + 1;
  const std::size_t scale = history + std::size_t{5} * 4;
  auto put = [](std::vector<std::byte>& b, std::size_t at, float value) {
    const std::uint32_t bits = Bits(value);
    for (int i = 0; i < 4; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<std::byte>((bits >> (8 * i)) & 0xffU);
  };
  ExpectRejected(target, Reframed(blob, [&](std::vector<std::byte>& b) { put(b, history + 4, -1.0f); }),
                 "amax history entry 1 of 'layer0.weight' is negative");
  ExpectRejected(target, Reframed(blob, [&](std::vector<std::byte>& b) { put(b, scale, 0.0f); }),
                 "scale of 'layer0.weight' (0.000000) is not finite and positive");
  ExpectRejected(
      target, Reframed(blob, [&](std::vector<std::byte>& b) { put(b, scale, std::numeric_limits<float>::infinity()); }),
      "is not finite and positive");
  ExpectRejected(target, Reframed(blob, [&](std::vector<std::byte>& b) { put(b, scale + 4, 3.0f); }),
                 "scale_inv of 'layer0.weight' (3.000000) is not 1 / scale");
  // A subnormal scale is positive and finite, but its inverse is Inf (the bits of 1 / scale, so
  // the scale_inv check alone passes): every decode would give Inf. The update never makes a
  // scale outside [FLT_MIN, FLT_MAX].
  ExpectRejected(target,
                 Reframed(blob,
                          [&](std::vector<std::byte>& b) {
                            put(b, scale, 1e-39f);
                            put(b, scale + 4, 1.0f / 1e-39f);
                          }),
                 "scale of 'layer0.weight' (0.000000) is below FLT_MIN");
  // NaN and Inf amaxes are legitimate history entries.
  DelayedScaling accepts = MakeRecipe();
  accepts.LoadStateDict(Reframed(blob, [&](std::vector<std::byte>& b) {
    put(b, history, std::numeric_limits<float>::quiet_NaN());
    put(b, history + 8, std::numeric_limits<float>::infinity());
  }));
  BOOST_TEST(std::isnan(accepts.AmaxHistory("layer0.weight")[0]));
}

BOOST_AUTO_TEST_CASE(CurrentScalingStateRoundTrips) {
  CurrentScaling recipe({.Fp8Format = Format::E4M3});
  recipe.Register("x", TensorRole::Forward, *Zeros({1}));
  mlfw_test::RecordAmax(recipe, "x", 3.5f);
  const std::vector<std::byte> blob = recipe.StateDict();
  CurrentScaling restored({.Fp8Format = Format::E4M3});
  restored.Register("x", TensorRole::Forward, *Zeros({1}));
  restored.LoadStateDict(blob);
  BOOST_TEST((restored.StateDict() == blob));
  BOOST_TEST(ValueOf(restored.Amax("x")) == 3.5f);
  CurrentScaling hybrid;
  hybrid.Register("x", TensorRole::Forward, *Zeros({1}));
  BOOST_CHECK_THROW(hybrid.LoadStateDict(blob), ArgumentError);
}

BOOST_AUTO_TEST_SUITE_END()
