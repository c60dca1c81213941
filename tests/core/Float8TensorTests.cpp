// FP8 tensors on the CPU backend: every factory, cast, view and per-tensor operation, the fused
// list operations, a framework's own FP8 tensor, and the places that refuse FP8 with an
// ArgumentError naming the dtype.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <boost/test/unit_test.hpp>

#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/distributed/fsdp/UnitPrecision.hpp>
#include <mlframework/mlframework.hpp>

#include "NonFinite.hpp"
#include "core/UserTensor.hpp"

using namespace mlframework;
using mlfw_test::kInf;

namespace {

constexpr DataType kFp8[] = {DataType::Float8E4M3FN, DataType::Float8E5M2};
constexpr DataType kAll[] = {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Float8E4M3FN,
                             DataType::Float8E5M2};

// The value @p x takes in @p dtype (the scalar conversions, the reference for tensors).
float RoundTo(DataType dtype, float x) {
  switch (dtype) {
    case DataType::Float16:
      return static_cast<float>(Float16(x));
    case DataType::BFloat16:
      return static_cast<float>(BFloat16(x));
    case DataType::Float8E4M3FN:
      return static_cast<float>(Float8E4M3FN(x));
    case DataType::Float8E5M2:
      return static_cast<float>(Float8E5M2(x));
    case DataType::Float32:
      break;
  }
  return x;
}

// Values exact in every dtype, and values each FP8 format rounds.
const std::vector<float> kExact = {0.0f, -0.0f, 1.0f, -2.5f, 0.375f, 96.0f, -0.015625f, 224.0f};
const std::vector<float> kRounded = {1.0625f, 300.0f, 1e-3f, -7.3f, 0.1f, 1000.0f, 3e-6f, -5e4f};

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Bits, so -0 differs from +0; any NaN equals any NaN.
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]) &&
        !(std::isnan(a[i]) && std::isnan(b[i]))) {
      return false;
    }
  }
  return true;
}

std::vector<float> Rounded(DataType dtype, const std::vector<float>& values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const float v : values) {
    out.push_back(RoundTo(dtype, v));
  }
  return out;
}

template <class Fn>
void ExpectArgumentError(Fn&& fn, const std::string& parameter, const std::string& needle) {
  try {
    fn();
    BOOST_ERROR("expected ArgumentError naming " << parameter);
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == parameter);
    BOOST_TEST(std::string(error.what()).find(needle) != std::string::npos, error.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8Tensors)

BOOST_AUTO_TEST_CASE(TheDtypesAreDeclared) {
  BOOST_TEST(ElementSize(DataType::Float8E4M3FN) == 1u);
  BOOST_TEST(ElementSize(DataType::Float8E5M2) == 1u);
  BOOST_TEST(ToString(DataType::Float8E4M3FN) == "Float8E4M3FN");
  BOOST_TEST(ToString(DataType::Float8E5M2) == "Float8E5M2");
  BOOST_TEST(IsValid(DataType::Float8E5M2));
  BOOST_TEST(!IsValid(static_cast<DataType>(kDataTypeCount)));
  BOOST_TEST(MaxFiniteValue(DataType::Float8E4M3FN) == 448.0);
  BOOST_TEST(MaxFiniteValue(DataType::Float8E5M2) == 57344.0);
  BOOST_TEST(IsFloat8(DataType::Float8E4M3FN));
  BOOST_TEST(!IsFloat8(DataType::BFloat16));
}

BOOST_AUTO_TEST_CASE(FactoriesRoundIntoTheDtype) {
  for (const DataType dtype : kFp8) {
    const TensorPtr zeros = Zeros({2, 3}, dtype);
    BOOST_TEST((zeros->GetDataType() == dtype));
    BOOST_TEST(zeros->HostBytes().size() == 6u);
    BOOST_TEST(zeros->ToFloatVector() == std::vector<float>(6, 0.0f));
    const TensorPtr t = FromVector(kRounded, {kRounded.size()}, dtype);
    BOOST_TEST(SameFloats(t->ToFloatVector(), Rounded(dtype, kRounded)));
    BOOST_TEST(Scalar(300.0f, dtype)->ToFloatVector()[0] == RoundTo(dtype, 300.0f));
    const TensorPtr empty = backends::cpu::Empty({4}, dtype);
    BOOST_TEST(empty->ToFloatVector() == std::vector<float>(4, 0.0f));
    const auto packed = ZerosContiguous({{3}, {5}, {1}}, dtype);
    BOOST_TEST(packed.size() == 3u);
    // Back to back, no padding: one byte per element.
    BOOST_TEST(packed[1]->HostBytes().data() == packed[0]->HostBytes().data() + 3);
    BOOST_TEST(packed[2]->HostBytes().data() == packed[1]->HostBytes().data() + 5);
    const auto like = ZerosContiguousLike(packed, dtype);
    BOOST_TEST((like[1]->GetShape() == Shape{5}));
    BOOST_TEST((like[1]->GetDataType() == dtype));
  }
  // The typed views of the elements.
  const TensorPtr e4m3 = FromVector({448.0f, -1.0f}, {2}, DataType::Float8E4M3FN);
  const auto e4m3_elements = backends::cpu::Elements<DataType::Float8E4M3FN>(*e4m3);
  BOOST_TEST(unsigned{e4m3_elements[0].bits} == 0x7eu);
  BOOST_TEST(static_cast<float>(e4m3_elements[1]) == -1.0f);
  const TensorPtr e5m2 = FromVector({57344.0f, kInf}, {2}, DataType::Float8E5M2);
  const auto e5m2_elements = backends::cpu::Elements<DataType::Float8E5M2>(*e5m2);
  BOOST_TEST(unsigned{e5m2_elements[0].bits} == 0x7bu);
  BOOST_TEST(unsigned{e5m2_elements[1].bits} == 0x7cu);
  BOOST_CHECK_THROW((void)backends::cpu::Elements<DataType::Float8E5M2>(*e4m3), ArgumentError);
}

BOOST_AUTO_TEST_CASE(CastsBetweenEveryPairOfDtypes) {
  for (const DataType from : kAll) {
    const TensorPtr source = FromVector(kRounded, {2, 4}, from);
    const std::vector<float> held = source->ToFloatVector();
    for (const DataType to : kAll) {
      const TensorPtr cast = source->CastTo(to);
      BOOST_TEST((cast->GetDataType() == to));
      BOOST_TEST((cast->GetShape() == Shape{2, 4}));
      // One rounding of the exact source value into the target.
      BOOST_TEST(SameFloats(cast->ToFloatVector(), Rounded(to, held)), ToString(from) << " -> " << ToString(to));
    }
  }
  // FP8 widens exactly into every wider dtype and back.
  for (const DataType dtype : kFp8) {
    const TensorPtr t = FromVector(kExact, {kExact.size()}, dtype);
    for (const DataType wide : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      const TensorPtr widened = t->CastTo(wide);
      BOOST_TEST(SameFloats(widened->ToFloatVector(), kExact));
      const TensorPtr back = widened->CastTo(dtype);
      BOOST_TEST(std::memcmp(back->HostBytes().data(), t->HostBytes().data(), kExact.size()) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(OverflowFollowsEachFormat) {
  const TensorPtr big = FromVector({500.0f, -1e6f, kInf, 7e4f}, {4}, DataType::Float32);
  const TensorPtr e4m3 = big->CastTo(DataType::Float8E4M3FN);
  BOOST_TEST((e4m3->ToFloatVector() == std::vector<float>{448.0f, -448.0f, 448.0f, 448.0f}));  // saturates
  BOOST_TEST(!e4m3->HasNonFinite());
  const TensorPtr e5m2 = big->CastTo(DataType::Float8E5M2);
  const auto v = e5m2->ToFloatVector();
  BOOST_TEST(v[0] == 512.0f);
  BOOST_TEST((std::isinf(v[1]) && v[1] < 0));
  BOOST_TEST(std::isinf(v[2]));
  BOOST_TEST(std::isinf(v[3]));
  BOOST_TEST(e5m2->HasNonFinite());
  BOOST_TEST(e5m2->HasInf());
  BOOST_TEST(!e5m2->HasNaN());
  const TensorPtr nan = FromVector({std::nanf(""), 1.0f}, {2}, DataType::Float8E4M3FN);
  BOOST_TEST(nan->HasNaN());
  BOOST_TEST(!nan->HasInf());
  BOOST_TEST(nan->HasNonFinite());
  BOOST_TEST(std::to_integer<unsigned>(nan->HostBytes()[0]) == 0x7fu);
  // The cast that writes them reports them, as for FP16.
  const std::vector<TensorPtr> src{big};
  const std::vector<TensorPtr> to_e5m2{Zeros({4}, DataType::Float8E5M2)};
  BOOST_TEST(CastInto(src, to_e5m2));
  const std::vector<TensorPtr> to_e4m3{Zeros({4}, DataType::Float8E4M3FN)};
  BOOST_TEST(!CastInto(src, to_e4m3));
}

// The overflow report reads FP8 gradients through their FP32 widening: E5M2's signed infinities
// and NaN, E4M3FN's NaN (it has no infinity).
BOOST_AUTO_TEST_CASE(OverflowReportsOfFp8Gradients) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<TensorPtr> tensors{FromVector({1.0f, kInf, -kInf, 2.0f}, {4}, DataType::Float8E5M2),
                                       FromVector({1.0f, 2.0f, nan}, {3}, DataType::Float8E4M3FN),
                                       FromVector({1.0f, 2.0f}, {2}, DataType::Float8E4M3FN)};
  const OverflowReport report = OverflowReport::FromTensors(tensors, 3, 1.0f);
  BOOST_TEST_REQUIRE(report.Tensors.size() == 2u);
  BOOST_TEST(report.Tensors[0].Name == "#0");
  BOOST_TEST(report.Tensors[0].NonFiniteCount == 2u);
  BOOST_TEST(report.Tensors[0].FirstIndex == 1u);
  BOOST_TEST((report.Tensors[0].HasPosInf && report.Tensors[0].HasNegInf && !report.Tensors[0].HasNaN));
  BOOST_TEST(report.Tensors[1].Name == "#1");
  BOOST_TEST(report.Tensors[1].NonFiniteCount == 1u);
  BOOST_TEST(report.Tensors[1].FirstIndex == 2u);
  BOOST_TEST((report.Tensors[1].HasNaN && !report.Tensors[1].HasPosInf));
}

BOOST_AUTO_TEST_CASE(PerTensorOperations) {
  for (const DataType dtype : kFp8) {
    const TensorPtr t = FromVector({1.0f, -2.0f, 3.0f}, {3}, dtype);
    BOOST_TEST((t->Multiply(2.0f)->ToFloatVector() == std::vector<float>{2.0f, -4.0f, 6.0f}));
    BOOST_TEST((t->Divide(4.0f)->ToFloatVector() == std::vector<float>{0.25f, -0.5f, 0.75f}));
    BOOST_TEST(t->SumOfSquares() == 14.0);
    BOOST_TEST(t->Clone()->ToFloatVector() == t->ToFloatVector());
    BOOST_TEST(t->Clone()->HostBytes().data() != t->HostBytes().data());
    t->MultiplyInPlace(1.5f);  // 4.5 is exact in E4M3FN (1.001 x 2^2), rounds to 4 or 5 in E5M2
    BOOST_TEST(SameFloats(t->ToFloatVector(), Rounded(dtype, {1.5f, -3.0f, 4.5f})));
    std::vector<float> out(3);
    t->CopyToFloats(out);
    BOOST_TEST(out == t->ToFloatVector());
    std::vector<float> wrong(2);
    BOOST_CHECK_THROW(t->CopyToFloats(wrong), ArgumentError);
    t->CopyFromFloats(std::vector<float>{0.1f, 0.2f, 0.3f});
    BOOST_TEST(SameFloats(t->ToFloatVector(), Rounded(dtype, {0.1f, 0.2f, 0.3f})));
    BOOST_CHECK_THROW(t->CopyFromFloats(std::vector<float>{1.0f}), ArgumentError);
    BOOST_TEST(!t->UnscaleAndCheck(2.0f));
    BOOST_TEST(t->UnscaleAndCheck(1e6f) == (dtype == DataType::Float8E5M2));  // E4M3FN saturates
  }
}

BOOST_AUTO_TEST_CASE(ViewsAndWrapsShareTheBytes) {
  for (const DataType dtype : kFp8) {
    const TensorPtr base = FromVector({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}, {5}, dtype);
    const TensorPtr view = backends::cpu::View(base, 1, {3});
    BOOST_TEST((view->GetDataType() == dtype));
    BOOST_TEST((view->ToFloatVector() == std::vector<float>{2.0f, 3.0f, 4.0f}));
    BOOST_TEST(view->HostBytes().data() == base->HostBytes().data() + 1);
    view->MultiplyInPlace(2.0f);
    BOOST_TEST((base->ToFloatVector() == std::vector<float>{1.0f, 4.0f, 6.0f, 8.0f, 5.0f}));
    BOOST_CHECK_THROW((void)backends::cpu::View(base, 3, {3}), ArgumentError);

    // Any address is aligned to a one-byte element.
    auto memory = std::make_shared<std::vector<std::uint8_t>>(9, std::uint8_t{0});
    (*memory)[1] = 0x38;  // 1.0 in E4M3FN (0.0111.000), 0.5 in E5M2 (0.01110.00)
    const TensorPtr wrapped = backends::cpu::Wrap(memory->data() + 1, {8}, dtype, memory);
    BOOST_TEST(wrapped->ToFloatVector()[0] == (dtype == DataType::Float8E4M3FN ? 1.0f : 0.5f));
    wrapped->CopyFromFloats(std::vector<float>(8, -1.0f));
    const std::uint8_t minus_one = dtype == DataType::Float8E4M3FN ? 0xb8 : 0xbc;
    BOOST_TEST(unsigned{(*memory)[8]} == unsigned{minus_one});
    BOOST_TEST(unsigned{(*memory)[0]} == 0u);
  }
}

BOOST_AUTO_TEST_CASE(FusedListOperations) {
  // A list mixing every dtype, FP8 included, in one call of each operation.
  std::vector<TensorPtr> list;
  for (const DataType dtype : kAll) {
    list.push_back(FromVector({1.0f, -2.0f, 0.5f}, {3}, dtype));
  }
  BOOST_TEST(!HasNonFinite(list));
  BOOST_TEST(SumOfSquares(list) == 5.0 * 5.25);
  BOOST_TEST(CheckAndSumSquares(list, 2.0f).SumOfSquares == 5.0 * 21.0);
  ScaleInPlace(list, 4.0f);
  for (const TensorPtr& t : list) {
    BOOST_TEST((t->ToFloatVector() == std::vector<float>{4.0f, -8.0f, 2.0f}), ToString(t->GetDataType()));
  }
  BOOST_TEST(!UnscaleAndCheck(list, 0.25f));
  for (const DataType dtype : kFp8) {
    const std::vector<TensorPtr> casts = Cast(list, dtype, 8.0f);
    for (const TensorPtr& c : casts) {
      BOOST_TEST((c->GetDataType() == dtype));
      BOOST_TEST((c->ToFloatVector() == std::vector<float>{8.0f, -16.0f, 4.0f}));
    }
    // The casts are views of one buffer, back to back.
    BOOST_TEST(casts[1]->HostBytes().data() == casts[0]->HostBytes().data() + 3);
    const std::vector<TensorPtr> widened = Cast(casts, DataType::Float32, 0.5f);
    BOOST_TEST((widened[4]->ToFloatVector() == std::vector<float>{4.0f, -8.0f, 2.0f}));
    std::vector<TensorPtr> targets;
    for (std::size_t i = 0; i < list.size(); ++i) {
      targets.push_back(Zeros({3}, dtype));
    }
    CopyInto(list, targets, -1.0f);
    BOOST_TEST((targets[0]->ToFloatVector() == std::vector<float>{-1.0f, 2.0f, -0.5f}));
    AddInto(list, targets, 2.0f);
    BOOST_TEST((targets[2]->ToFloatVector() == std::vector<float>{1.0f, -2.0f, 0.5f}));
  }
  const std::vector<TensorPtr> overflow{FromVector({1.0f}, {1}, DataType::Float8E5M2)};
  BOOST_TEST(UnscaleAndCheck(overflow, 1e5f));
  BOOST_TEST(HasNonFinite(overflow));
}

// A framework's own FP8 tensor with or without host bytes goes through the same casts.
BOOST_AUTO_TEST_CASE(UserTensorsOfFp8) {
  for (const DataType dtype : kFp8) {
    for (const bool host : {true, false}) {
      auto user = std::make_shared<testing::UserTensor>(kRounded, dtype, testing::Mode::Defaults, host);
      const std::vector<TensorPtr> src{user};
      const std::vector<TensorPtr> widened = Cast(src, DataType::Float32);
      BOOST_TEST(SameFloats(widened[0]->ToFloatVector(), Rounded(dtype, kRounded)));
      const std::vector<TensorPtr> back{FromVector(kRounded, {kRounded.size()}, DataType::Float32)};
      const std::vector<TensorPtr> dst{user};
      (void)CastInto(back, dst, 1.0f);
      BOOST_TEST(SameFloats(user->ToFloatVector(), Rounded(dtype, kRounded)));
    }
  }
}

BOOST_AUTO_TEST_CASE(HostConversionOfRawBuffers) {
  const std::vector<float> values = {1.0f, 300.0f, -0.1f};
  for (const DataType dtype : kFp8) {
    std::vector<std::uint8_t> bytes(values.size());
    ConvertHostElements(values.data(), DataType::Float32, bytes.data(), dtype, values.size());
    std::vector<std::uint16_t> half(values.size());
    ConvertHostElements(bytes.data(), dtype, half.data(), DataType::Float16, values.size());
    std::vector<float> back(values.size());
    ConvertHostElements(half.data(), DataType::Float16, back.data(), DataType::Float32, values.size());
    BOOST_TEST(SameFloats(back, Rounded(dtype, values)));
  }
}

BOOST_AUTO_TEST_CASE(PlacesWithoutFp8SayWhy) {
  for (const DataType dtype : kFp8) {
    const std::string name(ToString(dtype));
    const TensorPtr t = Zeros({2}, dtype);
    ExpectArgumentError([&] { (void)ToDLPack(t); }, "tensor", name);
    ExpectArgumentError([&] { (void)amp::ScaleFactor::GetRecommendedScale(dtype); }, "precision", name);
    optimizers::mixed_precision::MixedPrecisionOptions options;
    options.Precision = dtype;
    ExpectArgumentError([&] { options.Validate(); }, "Precision", name);
    distributed::fsdp::FSDPMixedPrecisionConfig config;
    config.ForwardDType = dtype;
    BOOST_CHECK_THROW(config.Validate(), ArgumentError);
    // FSDP gathers parameters in FP8 (with their scales) but never reduces gradients in it.
    BOOST_CHECK_NO_THROW(distributed::fsdp::FSDPConfig{.ParamDType = dtype}.Validate());
    ExpectArgumentError([&] { distributed::fsdp::FSDPConfig{.ReduceDType = dtype}.Validate(); }, "ReduceDType", name);
    BOOST_CHECK_NO_THROW(
        (distributed::fsdp::UnitPrecision{.ParamDType = dtype, .ReduceDType = std::nullopt}.Validate()));
    ExpectArgumentError(
        [&] { distributed::fsdp::UnitPrecision{.ParamDType = std::nullopt, .ReduceDType = dtype}.Validate(); },
        "precision.ReduceDType", name);
    distributed::LocalProcessGroup group;
    ExpectArgumentError([&] { group.AllReduce(*t); }, "tensor", name);
    ExpectArgumentError([&] { group.Broadcast(*t, 0); }, "tensor", name);
    const TensorPtr out = Zeros({2}, dtype);
    ExpectArgumentError([&] { group.ReduceScatter(*t, *out); }, "tensor", name);
    // An all-gather moves bytes: FP8 is gathered as it is (FSDP's FP8 parameter gathers).
    const TensorPtr gathered = FromVector({1.5f, -448.0f}, {2}, dtype);
    group.AllGather(*gathered, *out);
    BOOST_TEST(out->ToFloatVector() == gathered->ToFloatVector());
    out->CopyFromFloats(std::vector<float>(2, 0.0f));
    // The tensors are untouched.
    BOOST_TEST(t->ToFloatVector() == std::vector<float>(2, 0.0f));
  }
  // DLPack 0.x has no FP8 code: an import names the dtype field.
  std::vector<std::uint8_t> memory(4);
  std::vector<std::int64_t> shape{4};
  DLManagedTensor managed{};
  managed.dl_tensor.data = memory.data();
  managed.dl_tensor.device = DLDevice{kDLCPU, 0};
  managed.dl_tensor.ndim = 1;
  managed.dl_tensor.dtype = DLDataType{kDLFloat, 8, 1};
  managed.dl_tensor.shape = shape.data();
  ExpectArgumentError([&] { (void)FromDLPack(&managed); }, "managed->dl_tensor.dtype", "bits 8");
}

BOOST_AUTO_TEST_SUITE_END()
