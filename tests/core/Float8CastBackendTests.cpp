// TensorBackend's FP8 defaults (core/Float8Cast.hpp) for a user's backend without FP8 kernels:
// tensors whose ITensor::HostBytes() are their elements run the CPU kernels on that memory (same
// bytes as CPU tensors), others get an InvalidOperationError naming the backend and what to
// override; and a call that mixes backends is refused before anything is written.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

using namespace mlframework;

namespace {

// A backend with no kernel of its own: the FP8 calls take TensorBackend's defaults.
class PlainBackend final : public TensorBackend {
 public:
  std::string_view Name() const noexcept override { return "plain"; }
};

const PlainBackend kPlain;

// A tensor of PlainBackend over a CPU tensor's memory; @p host: whether it exposes that memory.
class PlainTensor final : public ITensor {
 public:
  PlainTensor(TensorPtr inner, bool host) : inner_(std::move(inner)), host_(host) {}
  DataType GetDataType() const override { return inner_->GetDataType(); }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override { return inner_->ToFloatVector(); }
  void CopyFromFloats(std::span<const float> values) override { inner_->CopyFromFloats(values); }
  const TensorBackend* Backend() const noexcept override { return &kPlain; }
  std::span<std::byte> HostStorage() const noexcept override {
    if (!host_) {
      return {};
    }
    const std::span<const std::byte> bytes = inner_->HostBytes();
    return {const_cast<std::byte*>(bytes.data()), bytes.size()};
  }
  const TensorPtr& Inner() const { return inner_; }

 private:
  TensorPtr inner_;
  bool host_;
};

TensorPtr Plain(TensorPtr inner, bool host = true) { return std::make_shared<PlainTensor>(std::move(inner), host); }

std::vector<float> Bytes(const TensorPtr& t) { return t->ToFloatVector(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8CastBackendDefaults)

BOOST_AUTO_TEST_CASE(HostAddressableTensorsRunTheCpuKernels) {
  const std::vector<float> a = {1.5f, -300.0f, 0.001f, 1000.0f, 70000.0f};
  const std::vector<float> b = {-2.0f, 0.25f};
  const std::vector<TensorPtr> cpu_src = {FromVector(a, {a.size()}), FromVector(b, {b.size()}, DataType::BFloat16)};
  const std::vector<TensorPtr> cpu_dst = {Zeros({a.size()}, DataType::Float8E4M3FN),
                                          Zeros({b.size()}, DataType::Float8E5M2)};
  const TensorPtr cpu_scale = FromVector({2.0f, 1.0f / 3.0f}, {2});
  const TensorPtr cpu_amax = Zeros({2});
  ScaledCastToFloat8(cpu_src, cpu_dst, cpu_scale, cpu_amax);

  const std::vector<TensorPtr> src = {Plain(FromVector(a, {a.size()})),
                                      Plain(FromVector(b, {b.size()}, DataType::BFloat16))};
  const std::vector<TensorPtr> dst = {Plain(Zeros({a.size()}, DataType::Float8E4M3FN)),
                                      Plain(Zeros({b.size()}, DataType::Float8E5M2))};
  const TensorPtr scale = Plain(FromVector({2.0f, 1.0f / 3.0f}, {2}));
  const TensorPtr amax = Plain(Zeros({2}));
  ScaledCastToFloat8(src, dst, scale, amax);
  BOOST_TEST(Bytes(dst[0]) == Bytes(cpu_dst[0]));
  BOOST_TEST(Bytes(dst[1]) == Bytes(cpu_dst[1]));
  BOOST_TEST(Bytes(amax) == Bytes(cpu_amax));
  BOOST_TEST(amax->ToFloatVector()[0] == 70000.0f);

  const TensorPtr back = Plain(Zeros({a.size()}));
  DequantizeFloat8(std::vector<TensorPtr>{dst[0]}, std::vector<TensorPtr>{back}, Plain(FromVector({0.5f}, {1})));
  const std::vector<float> decoded = back->ToFloatVector();
  BOOST_TEST(decoded[0] == 1.5f);
  BOOST_TEST(decoded[1] == -224.0f);  // -600 saturated to -448, times 0.5

  const TensorPtr per_tensor = Plain(Zeros({2}));
  mlframework::Amax(src, per_tensor);
  BOOST_TEST(per_tensor->ToFloatVector() == std::vector<float>({70000.0f, 2.0f}));
  BOOST_TEST(ListAmax(src) == 70000.0f);  // the backend cannot allocate: a host amax tensor
}

BOOST_AUTO_TEST_CASE(OtherTensorsGetAnErrorNamingTheBackend) {
  const std::vector<TensorPtr> src = {Plain(FromVector({1.0f}, {1}), false)};
  const std::vector<TensorPtr> dst = {Plain(Zeros({1}, DataType::Float8E4M3FN), false)};
  const auto names = [](const std::string& operation) {
    return [=](const InvalidOperationError& e) {
      const std::string what = e.what();
      return what.find("'plain'") != std::string::npos && what.find(operation) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(ScaledCastToFloat8(src, dst, Plain(FromVector({1.0f}, {1}), false), nullptr),
                        InvalidOperationError, names("ScaledCastToFloat8"));
  BOOST_CHECK_EXCEPTION(mlframework::Amax(src, Plain(Zeros({1}), false)), InvalidOperationError, names("AmaxInto"));
  BOOST_CHECK_EXCEPTION(DequantizeFloat8(dst, src, Plain(FromVector({1.0f}, {1}), false)), InvalidOperationError,
                        names("DequantizeFloat8"));
}

BOOST_AUTO_TEST_CASE(ACallThatMixesBackendsIsRefused) {
  const TensorPtr cpu_dst = Zeros({1}, DataType::Float8E4M3FN);
  const std::vector<TensorPtr> src = {Plain(FromVector({1.0f}, {1}))};
  BOOST_CHECK_EXCEPTION(
      ScaledCastToFloat8(src, std::vector<TensorPtr>{cpu_dst}, Plain(FromVector({1.0f}, {1})), nullptr), ArgumentError,
      [](const ArgumentError& e) {
        return e.Parameter() == "dst[0]" && std::string(e.what()).find("backend 'cpu'") != std::string::npos;
      });
  BOOST_TEST(cpu_dst->ToFloatVector()[0] == 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
