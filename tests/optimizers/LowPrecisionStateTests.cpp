// optimizers::Adam and optimizers::SGD with states and masters below FP32 (AdamOptions /
// SGDOptions formats): each configuration gives the same bits as the fused list step with the
// same formats; options that cannot work together are ArgumentErrors; StateDict() records the
// formats, block sizes and scales, so a save and load continues bit for bit; older blobs load as
// FP32 state; a load converts only when asked, and refuses values the target cannot hold.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "optimizers/OptimizerTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using namespace mlfw_test;

namespace {

const std::vector<std::size_t> kStateSizes = {1000, 77};  // parameters "a" and "b"
constexpr std::size_t kBlock = 64;

std::vector<std::uint8_t> BytesOf(std::span<const std::byte> bytes) {
  std::vector<std::uint8_t> out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::uint8_t> BytesOf(const TensorPtr& tensor) { return BytesOf(tensor->HostBytes()); }

std::vector<float> ScalesOf(const amp::StoredStateVector& stored) {
  return {stored.Scales.begin(), stored.Scales.end()};
}

// Weights around 1 for "a" and "b" (@p seed picks them), in @p dtype.
std::vector<TensorPtr> Weights(DataType dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TensorPtr> weights;
  for (const std::size_t n : kStateSizes) {
    std::vector<float> w = Random(n, rng, 0.5f);
    for (float& x : w) x += 1.0f;
    weights.push_back(FromVector(w, {n}, dtype));
  }
  return weights;
}

GradientMap Named(const std::vector<TensorPtr>& tensors) { return {{"a", tensors[0]}, {"b", tensors[1]}}; }

std::vector<TensorPtr> Clones(const std::vector<TensorPtr>& tensors) {
  std::vector<TensorPtr> out;
  for (const TensorPtr& t : tensors) out.push_back(t->Clone());
  return out;
}

// The FP32 gradients of step @p step.
std::vector<TensorPtr> StepGradients(int step) {
  std::mt19937 rng(1000 + static_cast<unsigned>(step));
  std::vector<TensorPtr> grads;
  for (const std::size_t n : kStateSizes) grads.push_back(FromVector(Random(n, rng, 0.1f), {n}));
  return grads;
}

DataType ParameterDType(MasterFormat masters) {
  return masters == MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16;
}

// One state list stored as a format, for the reference fused steps.
struct StoredList {
  std::vector<TensorPtr> data;
  std::vector<TensorPtr> scales;
  StoredList(StateFormat format, std::size_t block) {
    for (const std::size_t n : kStateSizes) {
      data.push_back(Zeros({n}, StateStorageDType(format)));
      if (IsBlockScaled(format)) scales.push_back(Zeros({StateBlockCount(n, block)}, DataType::Float32));
    }
  }
};

// The lists a class with @p masters keeps, built by hand for FusedAdamStep / FusedSGDStep.
struct StoredReference {
  std::vector<TensorPtr> params;
  std::vector<TensorPtr> remainders;
  StoredList first;
  StoredList second;
  StoredReference(std::vector<TensorPtr> weights, MasterFormat masters, StateFormat first_format,
                  StateFormat second_format, std::size_t block)
      : params(std::move(weights)), first(first_format, block), second(second_format, block) {
    if (masters == MasterFormat::BFloat16Remainder) {
      for (const std::size_t n : kStateSizes) remainders.push_back(Zeros({n}, DataType::BFloat16));
    }
  }
};

void RequireSameStored(const amp::StoredStateVector& stored, const TensorPtr& data,
                       const std::vector<TensorPtr>& scales, std::size_t i) {
  BOOST_TEST(BytesOf(stored.Codes) == BytesOf(data), boost::test_tools::per_element());
  if (!scales.empty()) {
    BOOST_TEST(ScalesOf(stored) == scales[i]->ToFloatVector(), boost::test_tools::per_element());
  } else {
    BOOST_TEST(stored.Scales.empty());
  }
}

struct Formats {
  StateFormat first;
  StateFormat second;
};

const std::vector<Formats> kAdamFormats = {{StateFormat::Float32, StateFormat::Float32},
                                           {StateFormat::BFloat16, StateFormat::BFloat16},
                                           {StateFormat::Float16, StateFormat::Float16},
                                           {StateFormat::Int8Block, StateFormat::UInt8Block},
                                           {StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block},
                                           {StateFormat::Float8E4M3Block, StateFormat::Float16}};

const std::vector<MasterFormat> kMasters = {MasterFormat::Float32, MasterFormat::BFloat16StochasticRounding,
                                            MasterFormat::BFloat16Remainder};

AdamOptions AdamWith(Formats f, MasterFormat masters) {
  AdamOptions o = AdamOptions::AdamW(1e-2, 1e-2);
  o.FirstMomentFormat = f.first;
  o.SecondMomentFormat = f.second;
  o.StateBlockSize = kBlock;
  o.Masters = masters;
  o.RoundingSeed = 42;
  return o;
}

SGDOptions SGDWith(StateFormat momentum, MasterFormat masters) {
  return SGDOptions{.LearningRate = 0.05,
                    .Momentum = 0.9,
                    .WeightDecay = 1e-3,
                    .MomentumFormat = momentum,
                    .StateBlockSize = kBlock,
                    .Masters = masters,
                    .RoundingSeed = 7};
}

// Runs @p steps steps of @p adam with the gradients of steps [first, first + steps).
void RunAdam(Adam& adam, int first, int steps) {
  for (int step = first; step < first + steps; ++step) {
    adam.SetGradients(Named(StepGradients(step)));
    adam.Step();
  }
}

void RunSGD(SGD& sgd, int first, int steps) {
  for (int step = first; step < first + steps; ++step) {
    sgd.SetGradients(Named(StepGradients(step)));
    sgd.Step();
  }
}

// Everything @p a and @p b store (parameters, states, scales) is the same bits.
template <class Optimizer>
void RequireSameState(const Optimizer& a, const Optimizer& b, std::size_t vectors) {
  for (const std::string name : {"a", "b"}) {
    BOOST_TEST(BytesOf(a.Parameters().at(name)) == BytesOf(b.Parameters().at(name)), boost::test_tools::per_element());
    BOOST_TEST(BytesOf(a.MasterWeights().at(name)) == BytesOf(b.MasterWeights().at(name)),
               boost::test_tools::per_element());
    for (std::size_t v = 0; v < vectors; ++v) {
      const amp::StoredStateVector sa = a.StoredState(name, v);
      const amp::StoredStateVector sb = b.StoredState(name, v);
      BOOST_TEST(static_cast<int>(sa.Format) == static_cast<int>(sb.Format));
      BOOST_TEST(BytesOf(sa.Codes) == BytesOf(sb.Codes), boost::test_tools::per_element());
      BOOST_TEST(ScalesOf(sa) == ScalesOf(sb), boost::test_tools::per_element());
    }
  }
}

template <class Optimizer>
void RequireArgumentError(const std::function<void()>& call, const std::string& parameter, const std::string& text) {
  try {
    call();
    BOOST_FAIL("expected an ArgumentError naming " + parameter);
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == parameter);
    BOOST_TEST(std::string(error.what()).find(text) != std::string::npos, error.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(LowPrecisionState)

BOOST_AUTO_TEST_CASE(AdamClassGivesTheFusedStepsBits) {
  for (const MasterFormat masters : kMasters) {
    for (const Formats f : kAdamFormats) {
      BOOST_TEST_CONTEXT(ToString(masters) << " " << ToString(f.first) << "/" << ToString(f.second)) {
        const AdamOptions o = AdamWith(f, masters);
        const std::vector<TensorPtr> initial = Weights(ParameterDType(masters), 3);
        Adam adam(Named(Clones(initial)), o);
        StoredReference ref(Clones(initial), masters, f.first, f.second, kBlock);
        for (int step = 1; step <= 3; ++step) {
          const std::vector<TensorPtr> grads = StepGradients(step);
          adam.SetGradients(Named(grads));
          adam.Step();
          FusedAdamStep(OptimizerStepLists{.Parameters = ref.params,
                                           .Gradients = grads,
                                           .FirstState = ref.first.data,
                                           .SecondState = ref.second.data,
                                           .FirstStateFormat = f.first,
                                           .SecondStateFormat = f.second,
                                           .FirstStateScales = ref.first.scales,
                                           .SecondStateScales = ref.second.scales,
                                           .StateBlockSize = kBlock,
                                           .Masters = masters,
                                           .ParameterRemainders = ref.remainders,
                                           .RoundingSeed = 42,
                                           .RoundingStep = static_cast<std::uint64_t>(step)},
                        AdamStepScalarsFor(o, step));
        }
        for (std::size_t i = 0; i < 2; ++i) {
          const std::string name = i == 0 ? "a" : "b";
          BOOST_TEST(BytesOf(adam.Parameters().at(name)) == BytesOf(ref.params[i]), boost::test_tools::per_element());
          RequireSameStored(adam.StoredState(name, 0), ref.first.data[i], ref.first.scales, i);
          RequireSameStored(adam.StoredState(name, 1), ref.second.data[i], ref.second.scales, i);
          // MasterRemainders(): the remainders the step keeps, by name, under BFloat16Remainder only.
          if (masters == MasterFormat::BFloat16Remainder) {
            BOOST_TEST(BytesOf(adam.MasterRemainders().at(name)) == BytesOf(ref.remainders[i]),
                       boost::test_tools::per_element());
          }
        }
        BOOST_TEST(adam.MasterRemainders().size() == (masters == MasterFormat::BFloat16Remainder ? 2u : 0u));
        BOOST_TEST(adam.Parameters().at("a")->ToFloatVector() != initial[0]->ToFloatVector());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SGDClassGivesTheFusedStepsBits) {
  for (const MasterFormat masters : kMasters) {
    for (const StateFormat format : {StateFormat::Float32, StateFormat::BFloat16, StateFormat::Float16,
                                     StateFormat::Int8Block, StateFormat::Float8E4M3Block}) {
      BOOST_TEST_CONTEXT(ToString(masters) << " " << ToString(format)) {
        const SGDOptions o = SGDWith(format, masters);
        const std::vector<TensorPtr> initial = Weights(ParameterDType(masters), 4);
        SGD sgd(Named(Clones(initial)), o);
        StoredReference ref(Clones(initial), masters, format, StateFormat::Float32, kBlock);
        for (int step = 1; step <= 3; ++step) {
          const std::vector<TensorPtr> grads = StepGradients(step);
          sgd.SetGradients(Named(grads));
          sgd.Step();
          FusedSGDStep(OptimizerStepLists{.Parameters = ref.params,
                                          .Gradients = grads,
                                          .FirstState = ref.first.data,
                                          .FirstStateFormat = format,
                                          .FirstStateScales = ref.first.scales,
                                          .StateBlockSize = kBlock,
                                          .Masters = masters,
                                          .ParameterRemainders = ref.remainders,
                                          .RoundingSeed = 7,
                                          .RoundingStep = static_cast<std::uint64_t>(step)},
                       SGDStepScalarsFor(o, step == 1));
        }
        for (std::size_t i = 0; i < 2; ++i) {
          const std::string name = i == 0 ? "a" : "b";
          BOOST_TEST(BytesOf(sgd.Parameters().at(name)) == BytesOf(ref.params[i]), boost::test_tools::per_element());
          RequireSameStored(sgd.StoredState(name, 0), ref.first.data[i], ref.first.scales, i);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(OptionsThatCannotWorkTogetherAreArgumentErrors) {
  const auto adam_with = [](const AdamOptions& o, DataType dtype) {
    return [o, dtype] { Adam adam(Named(Weights(dtype, 1)), o); };
  };
  AdamOptions o;
  o.StateBlockSize = 0;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "StateBlockSize", "is 0");
  o.StateBlockSize = 96;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "StateBlockSize", "is 96");
  o = AdamOptions{};
  o.FirstMomentFormat = StateFormat::UInt8Block;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "FirstMomentFormat", "UInt8Block");
  o = AdamOptions{};
  o.SecondMomentFormat = StateFormat::Int8Block;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "SecondMomentFormat", "Int8Block");
  o = AdamOptions{};
  o.SecondMomentFormat = static_cast<StateFormat>(9);
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "SecondMomentFormat", "is 9");
  o = AdamOptions{};
  o.Masters = MasterFormat::BFloat16StochasticRounding;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float32), "parameters[\"a\"]",
                             "Float32 tensor but the masters are BFloat16StochasticRounding");
  o.Masters = MasterFormat::BFloat16Remainder;
  RequireArgumentError<Adam>(adam_with(o, DataType::Float16), "parameters[\"a\"]", "Float16");
  o.Masters = static_cast<MasterFormat>(5);
  RequireArgumentError<Adam>(adam_with(o, DataType::BFloat16), "Masters", "is 5");
  SGDOptions s{.Momentum = 0.9, .MomentumFormat = StateFormat::UInt8Block};
  RequireArgumentError<SGD>([s] { SGD sgd(Named(Weights(DataType::Float32, 1)), s); }, "MomentumFormat", "UInt8Block");
  s = SGDOptions{.Momentum = 0.9, .StateBlockSize = 4096};
  RequireArgumentError<SGD>([s] { SGD sgd(Named(Weights(DataType::Float32, 1)), s); }, "StateBlockSize", "is 4096");
  s = SGDOptions{.Masters = MasterFormat::BFloat16Remainder};
  RequireArgumentError<SGD>([s] { SGD sgd(Named(Weights(DataType::Float32, 1)), s); }, "parameters[\"a\"]",
                            "BFloat16Remainder");
}

BOOST_AUTO_TEST_CASE(StateDictContinuesBitForBitInEveryFormat) {
  for (const MasterFormat masters : kMasters) {
    for (const Formats f : kAdamFormats) {
      BOOST_TEST_CONTEXT(ToString(masters) << " " << ToString(f.first) << "/" << ToString(f.second)) {
        Adam saved(Named(Weights(ParameterDType(masters), 5)), AdamWith(f, masters));
        RunAdam(saved, 1, 2);
        AdamOptions other = AdamWith(f, masters);
        other.RoundingSeed = 99;  // the blob's seed replaces it
        other.LearningRate = 0.5;
        Adam loaded(Named(Weights(ParameterDType(masters), 6)), other);
        loaded.LoadStateDict(saved.StateDict());
        BOOST_TEST(loaded.StepCount() == 2);
        BOOST_TEST(loaded.Options().RoundingSeed == 42u);
        BOOST_TEST(loaded.Options().LearningRate == 1e-2);
        RequireSameState(saved, loaded, 2);
        RunAdam(saved, 3, 2);
        RunAdam(loaded, 3, 2);
        RequireSameState(saved, loaded, 2);
      }
    }
  }
  for (const MasterFormat masters : kMasters) {
    for (const StateFormat format : {StateFormat::Float32, StateFormat::Float16, StateFormat::Int8Block}) {
      BOOST_TEST_CONTEXT(ToString(masters) << " " << ToString(format)) {
        SGD saved(Named(Weights(ParameterDType(masters), 5)), SGDWith(format, masters));
        SGDOptions other = SGDWith(format, masters);
        other.RoundingSeed = 3;  // the blob's seed replaces it
        SGD loaded(Named(Weights(ParameterDType(masters), 6)), other);
        loaded.LoadStateDict(saved.StateDict());  // no momentum buffer yet: none after the load
        BOOST_TEST(loaded.StoredState("a", 0).Codes.empty());
        RunSGD(saved, 1, 2);
        loaded.LoadStateDict(saved.StateDict());
        RequireSameState(saved, loaded, 1);
        RunSGD(saved, 3, 2);
        RunSGD(loaded, 3, 2);
        RequireSameState(saved, loaded, 1);
      }
    }
  }
}

// The layout of version 2 (FP32 masters and moments), written by hand.
std::vector<std::byte> Version2AdamBlob(const std::vector<std::vector<float>>& masters,
                                        const std::vector<std::vector<float>>& exp_avg,
                                        const std::vector<std::vector<float>>& exp_avg_sq) {
  mlframework::detail::BlobWriter writer("optimizers.Adam", 2);
  for (const double option : {1e-3, 0.9, 0.999, 1e-8, 0.0}) writer.F64(option);
  writer.U8(0);   // Adam
  writer.I64(3);  // steps
  const auto floats = [&](const std::vector<float>& values) {
    writer.U64(values.size());
    for (const float v : values) writer.F32(v);
  };
  writer.U64(2);
  for (std::size_t i = 0; i < 2; ++i) {
    writer.U32(1);
    writer.Bytes(std::as_bytes(std::span<const char>(i == 0 ? "a" : "b", 1)));
    floats(masters[i]);
  }
  for (std::size_t i = 0; i < 2; ++i) {
    floats(exp_avg[i]);
    floats(exp_avg_sq[i]);
  }
  return writer.Finish();
}

BOOST_AUTO_TEST_CASE(OlderBlobsLoadAsFloat32State) {
  std::mt19937 rng(8);
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<float>> exp_avg;
  std::vector<std::vector<float>> exp_avg_sq;
  for (const std::size_t n : kStateSizes) {
    masters.push_back(Random(n, rng, 1.0f));
    exp_avg.push_back(Random(n, rng, 0.01f));
    std::vector<float> v = Random(n, rng, 1e-4f);
    for (float& x : v) x = x * x;
    exp_avg_sq.push_back(v);
  }
  const std::vector<std::byte> blob = Version2AdamBlob(masters, exp_avg, exp_avg_sq);
  Adam fp32(Named(Weights(DataType::Float32, 1)), AdamOptions{});
  fp32.LoadStateDict(blob);
  BOOST_TEST(fp32.StepCount() == 3);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "a" : "b";
    BOOST_TEST(fp32.Parameters().at(name)->ToFloatVector() == masters[i], boost::test_tools::per_element());
    const std::span<const float> m = fp32.FirstMoments(name);
    const std::span<const float> v = fp32.SecondMoments(name);
    BOOST_TEST(std::vector<float>(m.begin(), m.end()) == exp_avg[i], boost::test_tools::per_element());
    BOOST_TEST(std::vector<float>(v.begin(), v.end()) == exp_avg_sq[i], boost::test_tools::per_element());
  }
  // Into 8-bit moments: only when asked, and then within the codes' bound.
  Adam eight(Named(Weights(DataType::Float32, 1)),
             AdamWith({StateFormat::Int8Block, StateFormat::UInt8Block}, MasterFormat::Float32));
  const std::vector<std::byte> before = eight.StateDict();
  RequireArgumentError<Adam>([&] { eight.LoadStateDict(blob); }, "state", "StateConversion::Convert");
  BOOST_TEST(BytesOf(eight.StateDict()) == BytesOf(before), boost::test_tools::per_element());
  eight.LoadStateDict(blob, amp::StateConversion::Convert);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "a" : "b";
    for (std::size_t v = 0; v < 2; ++v) {
      const std::vector<float>& want = v == 0 ? exp_avg[i] : exp_avg_sq[i];
      const amp::StoredStateVector stored = eight.StoredState(name, v);
      const std::span<const float> got = eight.StateVector(name, v);
      for (std::size_t k = 0; k < want.size(); ++k) {
        const float scale = stored.Scales[k / kBlock];
        const float absmax = scale * (v == 0 ? 127.0f : 255.0f);
        // StateFormat's bounds: a positive second moment below scale / 2 is kept at code 1.
        const bool kept_positive = v == 1 && want[k] > 0.0f && want[k] < scale / 2;
        const float bound = kept_positive ? scale : scale / 2 + absmax * std::ldexp(1.0f, -22);
        BOOST_TEST(std::fabs(got[k] - want[k]) <= bound, name << " state " << v << " element " << k);
      }
    }
  }
}

// The layout of version 3: version 4's, but a Float16 moment is plain FP16 values without
// scales. Written by hand: FP32 masters, both moments of each parameter as Float16.
std::vector<std::byte> Version3Float16AdamBlob(const std::vector<std::vector<float>>& masters,
                                               const std::vector<std::vector<float>>& exp_avg,
                                               const std::vector<std::vector<float>>& exp_avg_sq) {
  mlframework::detail::BlobWriter writer("optimizers.Adam", 3);
  for (const double option : {1e-2, 0.9, 0.999, 1e-8, 1e-2}) writer.F64(option);
  writer.U8(1);   // AdamW
  writer.U64(7);  // rounding seed
  writer.I64(3);  // steps
  writer.U8(static_cast<std::uint8_t>(MasterFormat::Float32));
  writer.U64(2);
  for (std::size_t i = 0; i < 2; ++i) {
    writer.U32(1);
    writer.Bytes(std::as_bytes(std::span<const char>(i == 0 ? "a" : "b", 1)));
    writer.U64(masters[i].size());
    for (const float v : masters[i]) writer.F32(v);
  }
  const auto half = [&](const std::vector<float>& values) {
    writer.U8(1);  // present
    writer.U8(static_cast<std::uint8_t>(StateFormat::Float16));
    writer.U64(kBlock);
    writer.U64(values.size());
    writer.Bytes(FromVector(values, {values.size()})->CastTo(DataType::Float16)->HostBytes());
    writer.U64(0);  // no scales
  };
  for (std::size_t i = 0; i < 2; ++i) {
    half(exp_avg[i]);
    half(exp_avg_sq[i]);
  }
  return writer.Finish();
}

BOOST_AUTO_TEST_CASE(OlderFloat16MomentsLoadIntoScaledBlocks) {
  // FP16 values in blocks whose largest value is an FP16 value: every one is a code of its
  // block's power-of-two scale, so the conversion is exact, and needs no StateConversion.
  std::mt19937 rng(12);
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<float>> exp_avg;
  std::vector<std::vector<float>> exp_avg_sq;
  for (const std::size_t n : kStateSizes) {
    masters.push_back(Random(n, rng, 1.0f));
    exp_avg.push_back(FromVector(Random(n, rng, 0.01f), {n})->CastTo(DataType::Float16)->ToFloatVector());
    std::vector<float> v = Random(n, rng, 3e-3f);
    for (float& x : v) x = x * x;  // many below FP16's normal range, some subnormal
    v[3] = 0x1p-24f;               // the smallest subnormal, where the keep-positive rule held them
    exp_avg_sq.push_back(FromVector(v, {n})->CastTo(DataType::Float16)->ToFloatVector());
  }
  const std::vector<std::byte> blob = Version3Float16AdamBlob(masters, exp_avg, exp_avg_sq);
  Adam half(Named(Weights(DataType::Float32, 1)),
            AdamWith({StateFormat::Float16, StateFormat::Float16}, MasterFormat::Float32));
  half.LoadStateDict(blob);
  BOOST_TEST(half.StepCount() == 3);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "a" : "b";
    for (std::size_t v = 0; v < 2; ++v) {
      const std::vector<float>& want = v == 0 ? exp_avg[i] : exp_avg_sq[i];
      const std::span<const float> got = half.StateVector(name, v);
      BOOST_TEST(std::vector<float>(got.begin(), got.end()) == want, boost::test_tools::per_element());
      BOOST_TEST(half.StoredState(name, v).Scales.size() == StateBlockCount(want.size(), kBlock));
    }
  }
  // It continues as the same state saved in the current format does.
  Adam again(Named(Weights(DataType::Float32, 1)),
             AdamWith({StateFormat::Float16, StateFormat::Float16}, MasterFormat::Float32));
  again.LoadStateDict(half.StateDict());
  RunAdam(half, 4, 2);
  RunAdam(again, 4, 2);
  RequireSameState(half, again, 2);
  // Into another format, as any other: only when asked.
  Adam fp32(Named(Weights(DataType::Float32, 1)),
            AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::Float32));
  RequireArgumentError<Adam>([&] { fp32.LoadStateDict(blob); }, "state", "StateConversion::Convert");
  fp32.LoadStateDict(blob, amp::StateConversion::Convert);
  const std::span<const float> v = fp32.SecondMoments("b");
  BOOST_TEST(std::vector<float>(v.begin(), v.end()) == exp_avg_sq[1], boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(LoadConvertsOnlyWhenAskedAndRefusesWhatCannotBeConverted) {
  // 8-bit and BF16 moments into FP32: decoded exactly.
  for (const Formats f : {Formats{StateFormat::Int8Block, StateFormat::UInt8Block},
                          Formats{StateFormat::BFloat16, StateFormat::Float8E4M3Block}}) {
    Adam low(Named(Weights(DataType::Float32, 2)), AdamWith(f, MasterFormat::Float32));
    RunAdam(low, 1, 2);
    Adam fp32(Named(Weights(DataType::Float32, 2)),
              AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::Float32));
    RequireArgumentError<Adam>([&] { fp32.LoadStateDict(low.StateDict()); }, "state", ToString(f.first));
    fp32.LoadStateDict(low.StateDict(), amp::StateConversion::Convert);
    for (const std::string name : {"a", "b"}) {
      for (std::size_t v = 0; v < 2; ++v) {
        const std::span<const float> want = low.StateVector(name, v);
        const std::span<const float> got = fp32.StateVector(name, v);
        BOOST_TEST(std::vector<float>(got.begin(), got.end()) == std::vector<float>(want.begin(), want.end()),
                   boost::test_tools::per_element());
      }
    }
  }
  // Another block size is another format: converted only when asked.
  AdamOptions blocks128 = AdamWith({StateFormat::Int8Block, StateFormat::UInt8Block}, MasterFormat::Float32);
  blocks128.StateBlockSize = 128;
  Adam a64(Named(Weights(DataType::Float32, 2)),
           AdamWith({StateFormat::Int8Block, StateFormat::UInt8Block}, MasterFormat::Float32));
  RunAdam(a64, 1, 1);
  Adam a128(Named(Weights(DataType::Float32, 2)), blocks128);
  RequireArgumentError<Adam>([&] { a128.LoadStateDict(a64.StateDict()); }, "state", "blocks of 64");
  a128.LoadStateDict(a64.StateDict(), amp::StateConversion::Convert);
  BOOST_TEST(a128.StoredState("a", 0).Scales.size() == StateBlockCount(kStateSizes[0], 128));
  // FP32 masters of BF16 parameters into remainders and back: exact.
  Adam fp32_masters(Named(Weights(DataType::BFloat16, 2)),
                    AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::Float32));
  RunAdam(fp32_masters, 1, 2);
  Adam remainder(Named(Weights(DataType::BFloat16, 2)),
                 AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::BFloat16Remainder));
  RequireArgumentError<Adam>([&] { remainder.LoadStateDict(fp32_masters.StateDict()); }, "state",
                             "Float32 masters but this optimizer keeps BFloat16Remainder masters");
  remainder.LoadStateDict(fp32_masters.StateDict(), amp::StateConversion::Convert);
  Adam back(Named(Weights(DataType::BFloat16, 2)),
            AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::Float32));
  back.LoadStateDict(remainder.StateDict(), amp::StateConversion::Convert);
  for (const std::string name : {"a", "b"}) {
    BOOST_TEST(BytesOf(back.MasterWeights().at(name)) == BytesOf(fp32_masters.MasterWeights().at(name)),
               boost::test_tools::per_element());
  }
  // A second moment FP16 cannot hold: refused with the element named, nothing changed.
  Adam big(Named(Weights(DataType::Float32, 2)),
           AdamWith({StateFormat::Float32, StateFormat::Float32}, MasterFormat::Float32));
  std::vector<TensorPtr> huge = StepGradients(1);
  std::vector<float> g = huge[1]->ToFloatVector();
  g[5] = 1e30f;  // exp_avg_sq = (0.001 * 1e30) * 1e30: infinite, which no format holds
  huge[1] = FromVector(g, {g.size()});
  big.SetGradients(Named(huge));
  big.Step();
  Adam half(Named(Weights(DataType::Float32, 2)),
            AdamWith({StateFormat::Float32, StateFormat::Float16}, MasterFormat::Float32));
  const std::vector<std::byte> before = half.StateDict();
  RequireArgumentError<Adam>([&] { half.LoadStateDict(big.StateDict(), amp::StateConversion::Convert); }, "state",
                             "second moments of \"b\" element 5");
  BOOST_TEST(BytesOf(half.StateDict()) == BytesOf(before), boost::test_tools::per_element());
}

// A block whose largest value is below 448 x 2^-128 has a subnormal scale whose reciprocal
// overflows; its elements must encode as zero (a positive second moment as the smallest code),
// never as 0 x inf = NaN. Adam's exp_avg of weights that see a gradient once and then none
// (inputs that are almost always zero) decays into such blocks after about 700 steps.
BOOST_AUTO_TEST_CASE(Float8BlocksWithATinyScaleEncodeZerosNotNaN) {
  constexpr std::size_t kN = 256;
  std::vector<float> tiny(kN, 0.0f);
  tiny[0] = 1e-36f;  // scale 1e-36 / 448, below 2^-128
  tiny[1] = 5e-37f;
  AdamOptions o;
  o.FirstMomentFormat = StateFormat::Float8E4M3Block;
  o.SecondMomentFormat = StateFormat::Float8E4M3Block;
  GradientMap params{{"w", FromVector(std::vector<float>(kN, 1.0f), {kN})}};
  Adam adam(params, o);
  adam.RestoreState(
      {{"w", AdamParameterState{.Master = std::vector<float>(kN, 1.0f), .FirstMoments = tiny, .SecondMoments = tiny}}},
      10);
  const auto all_finite = [](std::span<const float> values) {
    for (const float v : values) {
      if (!std::isfinite(v)) return false;
    }
    return true;
  };
  BOOST_TEST(all_finite(adam.FirstMoments("w")));
  BOOST_TEST(all_finite(adam.SecondMoments("w")));
  for (std::size_t i = 2; i < kN; ++i) {
    BOOST_TEST(adam.FirstMoments("w")[i] == 0.0f);
  }
  // A step with zero gradients decays and encodes them again; the weights stay finite.
  adam.SetGradients({{"w", FromVector(std::vector<float>(kN, 0.0f), {kN})}});
  adam.Step();
  BOOST_TEST(all_finite(adam.FirstMoments("w")));
  BOOST_TEST(all_finite(adam.SecondMoments("w")));
  BOOST_TEST(all_finite(params.at("w")->ToFloatVector()));
  BOOST_TEST(adam.SecondMoments("w")[0] >= 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
