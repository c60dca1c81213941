// GradScaler recognises "the same gradients" by their memory: a framework that owns its
// gradients hands them wrapped in new tensors on every call (backends::cpu::Wrap, FromDLPack).
// Within one iteration the same memory is the same gradients (the clipping flow, double
// stepping); after a new Scale(loss) the same memory is a new step (kept .grad buffers).
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>

#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;

namespace {

// Gradients a framework owns: "a" of 3 and "b" of 2 elements of one dtype, in buffers it keeps
// across steps (zero_grad without set_to_none), wrapped anew on every GetGradients().
class FrameworkOptimizer final : public amp::IOptimizer {
 public:
  FrameworkOptimizer(DataType dtype, bool dlpack) : dtype_(dtype), dlpack_(dlpack) {}

  // What backward writes: the gradients {1, -2, 0.5} and {4, -0.25} times @p factor.
  void Backward(float factor) {
    Fill(a_, {1.0f * factor, -2.0f * factor, 0.5f * factor});
    Fill(b_, {4.0f * factor, -0.25f * factor});
  }

  GradientMap GetGradients() override { return {{"a", Wrap(a_, 3)}, {"b", Wrap(b_, 2)}}; }
  void SetGradients(const GradientMap& gradients) override {
    set_to = gradients;
    ++set_calls;
  }
  // Steps with what SetGradients handed over this step, else with its own gradients.
  void Step() override {
    ++steps;
    stepped_with = set_calls > 0 ? set_to : GetGradients();
    set_calls = 0;
  }

  int steps = 0;
  int set_calls = 0;
  GradientMap set_to;
  GradientMap stepped_with;

 private:
  TensorPtr Wrap(std::vector<float>& buffer, std::size_t count) const {
    const TensorPtr tensor = backends::cpu::Wrap(buffer.data(), {count}, dtype_, nullptr);
    return dlpack_ ? FromDLPack(ToDLPack(tensor)) : tensor;
  }
  void Fill(std::vector<float>& buffer, const std::vector<float>& values) const {
    const TensorPtr staged = FromVector(values, {values.size()}, dtype_);
    std::memcpy(buffer.data(), staged->HostBytes().data(), staged->HostBytes().size());
  }

  DataType dtype_;
  bool dlpack_;
  std::vector<float> a_ = std::vector<float>(3);  // room for 3 elements of any dtype
  std::vector<float> b_ = std::vector<float>(2);
};

template <typename F>
void ExpectInvalidOperation(F&& misuse, const std::string& hint) {
  try {
    misuse();
    BOOST_FAIL("expected InvalidOperationError");
  } catch (const InvalidOperationError& e) {
    BOOST_TEST(std::string(e.what()).find(hint) != std::string::npos, "message: " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerMemoryTests)

// Unscale(gradients) then Step(optimizer), whose GetGradients() wraps the same memory anew: the
// optimizer's gradients are recognised and unscaled once (FP32 in place, FP16 into FP32 tensors
// handed over with SetGradients).
BOOST_AUTO_TEST_CASE(ClippingFlowOnRewrappedGradients) {
  for (const bool dlpack : {false, true}) {
    for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
      BOOST_TEST_CONTEXT((dlpack ? "FromDLPack " : "Wrap ") << ToString(dtype)) {
        GradScaler scaler(DynamicScalerConfig{.InitialScale = 4.0f});
        FrameworkOptimizer opt(dtype, dlpack);
        scaler.Scale(Scalar(1.0f));
        opt.Backward(4.0f);
        const GradientMap unscaled = scaler.Unscale(opt.GetGradients());
        BOOST_TEST(Values(unscaled.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
                   boost::test_tools::per_element());
        // Already unscaled in this iteration: the recorded result, no second pass.
        BOOST_TEST(!scaler.CheckOverflow(opt.GetGradients()));
        BOOST_TEST(scaler.Step(opt));
        BOOST_TEST(opt.steps == 1);
        BOOST_TEST(Values(opt.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
                   boost::test_tools::per_element());
        BOOST_TEST(Values(opt.stepped_with.at("b")) == (std::vector<float>{4.0f, -0.25f}),
                   boost::test_tools::per_element());
        BOOST_TEST(Values(opt.GetGradients().at("b"))[0] == (dtype == DataType::Float32 ? 4.0f : 16.0f));
        BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      }
    }
  }
}

// The same memory wrapped anew is still the same gradients within one iteration: stepping or
// unscaling them again before a new Scale(loss) is an error, and nothing is unscaled twice.
BOOST_AUTO_TEST_CASE(SteppingRewrappedGradientsTwiceIsAnError) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    BOOST_TEST_CONTEXT(ToString(dtype)) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
      FrameworkOptimizer opt(dtype, false);
      scaler.Scale(Scalar(1.0f));
      opt.Backward(8.0f);
      BOOST_TEST(scaler.Step(opt));
      ExpectInvalidOperation([&] { scaler.Step(opt); }, "twice");
      ExpectInvalidOperation([&] { scaler.Unscale(opt.GetGradients()); }, "already unscaled");
      BOOST_TEST(opt.steps == 1);
      BOOST_TEST(Values(opt.GetGradients().at("a"))[0] == (dtype == DataType::Float32 ? 1.0f : 8.0f));
    }
  }
}

// Other memory holding the same values is not the optimizer's gradients.
BOOST_AUTO_TEST_CASE(EqualValuesInOtherMemoryAreOtherGradients) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 2.0f});
  FrameworkOptimizer opt(DataType::Float32, false);
  FrameworkOptimizer other(DataType::Float32, false);
  scaler.Scale(Scalar(1.0f));
  opt.Backward(2.0f);
  other.Backward(2.0f);
  scaler.Unscale(other.GetGradients());
  ExpectInvalidOperation([&] { scaler.Step(opt); }, "not this optimizer's");
  BOOST_TEST(opt.steps == 0);
}

// A framework that keeps its gradient buffers hands the same memory every iteration: after a
// new Scale(loss) it is a new step, in the automatic and the clipping flow, with an overflow
// skipped on the way.
BOOST_AUTO_TEST_CASE(TheSameMemoryNextIterationIsANewStep) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    for (const bool clipping : {false, true}) {
      BOOST_TEST_CONTEXT(ToString(dtype) << (clipping ? ", clipping flow" : ", automatic flow")) {
        GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f, .GrowthInterval = 1000});
        FrameworkOptimizer opt(dtype, true);
        for (int iteration = 0; iteration < 4; ++iteration) {
          scaler.Scale(Scalar(1.0f));
          const float scale = scaler.CurrentScale();
          opt.Backward(scale * static_cast<float>(iteration + 1));
          if (iteration == 2) {
            opt.Backward(std::numeric_limits<float>::infinity());
          }
          if (clipping) {
            scaler.Unscale(opt.GetGradients());
          }
          const bool stepped = scaler.Step(opt);
          BOOST_TEST(stepped == (iteration != 2), "iteration " << iteration);
          if (stepped) {
            const auto k = static_cast<float>(iteration + 1);
            BOOST_TEST(Values(opt.stepped_with.at("a")) == (std::vector<float>{k, -2.0f * k, 0.5f * k}),
                       boost::test_tools::per_element());
          }
        }
        BOOST_TEST(opt.steps == 3);
        BOOST_TEST(scaler.GetStats()->TotalSteps == 4);
        BOOST_TEST(scaler.CurrentScale() == 8.0f);  // backed off once, at the overflow
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
