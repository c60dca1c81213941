// The fused list operations (MultiTensor.hpp) on tensors without a backend: the same bits as on
// the library's own tensors, through the CPU kernels when HostBytes() are the elements (no
// virtual called), else through the tensor's floats (CopyToFloats(), overridden or not, and
// CopyFromFloats()). FP32, FP16 and BF16; non-finite values found.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"
#include "core/UserTensor.hpp"

using namespace mlframework;
using mlframework::testing::Mode;
using mlframework::testing::UserTensor;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

const std::vector<DataType> kDtypes = {DataType::Float32, DataType::Float16, DataType::BFloat16};

// How a user tensor is built for one run of a case.
struct Kind {
  Mode mode;
  bool host;
  std::size_t misalign = 0;
  bool host_bytes_short = false;
};

// Host bytes the kernels take; the virtuals, overridden or not; host bytes the library must not
// trust (misaligned for the dtype, shorter than Size()), which go through the virtuals.
const std::vector<Kind> kKinds = {{Mode::Defaults, true},         {Mode::Overrides, true},   {Mode::Defaults, false},
                                  {Mode::Overrides, false},       {Mode::Defaults, true, 1}, {Mode::Overrides, true, 1},
                                  {Mode::Defaults, true, 0, true}};

// Runs @p body for every dtype and kind of user tensor, naming them in failures.
void ForEachCase(void (*body)(DataType, const Kind&)) {
  for (const DataType dtype : kDtypes) {
    for (const Kind& kind : kKinds) {
      BOOST_TEST_CONTEXT(ToString(dtype) << (kind.mode == Mode::Overrides ? " overrides" : " defaults")
                                         << (kind.host ? " host" : " opaque") << " misalign " << kind.misalign
                                         << (kind.host_bytes_short ? " short" : "")) {
        body(dtype, kind);
      }
    }
  }
}

bool KernelPath(const Kind& kind) { return kind.host && kind.misalign == 0 && !kind.host_bytes_short; }

// Gradients of a few sizes, one of them longer than a kernel chunk.
std::vector<std::vector<float>> Values() {
  std::vector<std::vector<float>> values = {{1.5f, -2.25f, 3.0f}, {}, std::vector<float>(70000)};
  for (std::size_t i = 0; i < values[2].size(); ++i) {
    values[2][i] = static_cast<float>(i % 977) * 0.03125f - 15.0f;
  }
  values.push_back({0.1f, 0.2f, 0.3f, 0.4f, 0.5f});
  return values;
}

struct Lists {
  std::vector<std::shared_ptr<UserTensor>> user;
  std::vector<TensorPtr> as_list;  // the user tensors
  std::vector<TensorPtr> native;   // the library's tensors holding the same values
};

Lists Make(const std::vector<std::vector<float>>& values, DataType dtype, const Kind& kind) {
  Lists lists;
  for (const std::vector<float>& v : values) {
    lists.user.push_back(
        std::make_shared<UserTensor>(v, dtype, kind.mode, kind.host, kind.misalign, kind.host_bytes_short));
    lists.as_list.push_back(lists.user.back());
    lists.native.push_back(FromVector(v, {v.size()}, dtype));
  }
  return lists;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void ExpectSameElements(const Lists& lists) {
  for (std::size_t i = 0; i < lists.user.size(); ++i) {
    BOOST_TEST(SameBits(lists.user[i]->Floats(), lists.native[i]->ToFloatVector()), "tensor " << i);
  }
}

void ExpectNoVirtualCalls(const Lists& lists) {
  for (const auto& tensor : lists.user) {
    const testing::VirtualCalls& c = tensor->calls;
    BOOST_TEST(c.to_float_vector + c.copy_from_floats + c.copy_to_floats == 0);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GenericTensors)

namespace {
void UnscaleAndCheckMatchesNativeCase(DataType dtype, const Kind& kind) {
  Lists lists = Make(Values(), dtype, kind);
  BOOST_TEST(!UnscaleAndCheck(lists.as_list, 0.37f) == !UnscaleAndCheck(lists.native, 0.37f));
  ExpectSameElements(lists);
  if (KernelPath(kind)) {
    ExpectNoVirtualCalls(lists);
  }
  for (const auto& tensor : lists.user) {
    if (tensor->Size() == 0) {
      BOOST_TEST(tensor->calls.copy_from_floats == 0);  // nothing to do
      continue;
    }
    if (!KernelPath(kind)) {
      BOOST_TEST(tensor->calls.copy_from_floats == 1);  // the floats fallback: read, scale, write back once
    }
    if (!KernelPath(kind) && kind.mode == Mode::Overrides) {
      BOOST_TEST(tensor->calls.copy_to_floats >= 1);  // read through the override, into the library's buffer
      BOOST_TEST(tensor->calls.to_float_vector == 0);
    }
    if (!KernelPath(kind) && kind.mode == Mode::Defaults) {
      BOOST_TEST(tensor->calls.to_float_vector >= 1);  // CopyToFloats' default: through ToFloatVector()
    }
  }

  // Non-finite values: one in the input, and one made by the scale (overflow in the dtype).
  Lists inf = Make({{1.0f, 2.0f}, {3.0f, kInf}}, dtype, kind);
  BOOST_TEST(UnscaleAndCheck(inf.as_list, 0.5f));
  Lists nan = Make({{kNaN}, {1.0f}}, dtype, kind);
  BOOST_TEST(UnscaleAndCheck(nan.as_list, 1.0f));
  const float big = dtype == DataType::Float16 ? 60000.0f : 3.0e38f;
  Lists overflow = Make({{1.0f}, {big}}, dtype, kind);
  BOOST_TEST(UnscaleAndCheck(overflow.as_list, 4.0f));
  BOOST_TEST(std::isinf(overflow.user[1]->Floats()[0]));
  Lists finite = Make({{1.0f}, {big}}, dtype, kind);
  BOOST_TEST(!UnscaleAndCheck(finite.as_list, 0.25f));
}
}  // namespace

BOOST_AUTO_TEST_CASE(UnscaleAndCheckMatchesNative) { ForEachCase(&UnscaleAndCheckMatchesNativeCase); }

namespace {
void ReadOperationsMatchNativeCase(DataType dtype, const Kind& kind) {
  Lists lists = Make(Values(), dtype, kind);
  BOOST_TEST(!HasNonFinite(lists.as_list));
  const NonFiniteAndNorm user = CheckAndSumSquares(lists.as_list, 0.5f);
  const NonFiniteAndNorm native = CheckAndSumSquares(lists.native, 0.5f);
  BOOST_TEST(!user.FoundNonFinite);
  // The virtuals sum in FP64 per tensor, the kernels in FP32 partials (in an order that follows
  // where the tensors lie): equal to rounding.
  BOOST_TEST(user.SumOfSquares == native.SumOfSquares, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(SumOfSquares(lists.as_list, 2.0f) == SumOfSquares(lists.native, 2.0f), boost::test_tools::tolerance(1e-5));
  if (KernelPath(kind)) {
    ExpectNoVirtualCalls(lists);
  }

  ScaleInPlace(lists.as_list, 3.0f);
  ScaleInPlace(lists.native, 3.0f);
  ExpectSameElements(lists);

  Lists nan = Make({{1.0f}, {2.0f, kNaN}}, dtype, kind);
  BOOST_TEST(HasNonFinite(nan.as_list));
  BOOST_TEST(CheckAndSumSquares(nan.as_list).FoundNonFinite);
  Lists inf = Make({{-kInf}, {2.0f}}, dtype, kind);
  BOOST_TEST(HasNonFinite(inf.as_list));
}
}  // namespace

BOOST_AUTO_TEST_CASE(ReadOperationsMatchNative) { ForEachCase(&ReadOperationsMatchNativeCase); }

namespace {
void CastsMatchNativeCase(DataType dtype, const Kind& kind) {
  for (const DataType to : kDtypes) {
    // From user tensors into the library's buffer.
    Lists lists = Make(Values(), dtype, kind);
    const std::vector<TensorPtr> from_user = Cast(lists.as_list, to, 0.5f);
    const std::vector<TensorPtr> from_native = Cast(lists.native, to, 0.5f);
    for (std::size_t i = 0; i < from_user.size(); ++i) {
      BOOST_TEST(SameBits(from_user[i]->ToFloatVector(), from_native[i]->ToFloatVector()));
    }
    for (const auto& tensor : lists.user) {
      if (tensor->Size() == 0) {
        continue;  // nothing to read: no virtual runs whatever the path
      }
      BOOST_TEST(tensor->calls.to_float_vector + tensor->calls.copy_to_floats == (KernelPath(kind) ? 0 : 1));
      if (!KernelPath(kind) && kind.mode == Mode::Overrides) {
        BOOST_TEST(tensor->calls.copy_to_floats == 1);  // written into the library's buffer
      }
    }

    // From the library's tensors into user tensors, and between user tensors.
    Lists into = Make(Values(), to, kind);
    for (const auto& tensor : into.user) {
      tensor->MultiplyInPlace(0.0f);
      tensor->calls = {};
    }
    BOOST_TEST(!CastInto(lists.native, into.as_list, 2.0f));
    std::vector<TensorPtr> expected = ZerosContiguousLike(lists.native, to);
    BOOST_TEST(!CastInto(lists.native, expected, 2.0f));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      BOOST_TEST(SameBits(into.user[i]->Floats(), expected[i]->ToFloatVector()));
    }
    CopyInto(lists.as_list, into.as_list, 2.0f);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      BOOST_TEST(SameBits(into.user[i]->Floats(), expected[i]->ToFloatVector()));
    }
    AddInto(lists.as_list, into.as_list, 1.0f);
    AddInto(lists.native, expected, 1.0f);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      BOOST_TEST(SameBits(into.user[i]->Floats(), expected[i]->ToFloatVector()));
    }
  }

  // The flag: an Inf in the source, and a value that overflows only when narrowed to FP16.
  Lists inf = Make({{1.0f}, {kInf}}, dtype, kind);
  BOOST_TEST(CastInto(inf.as_list, ZerosContiguousLike(inf.native, DataType::Float32), 1.0f));
  Lists wide = Make({{70000.0f}}, dtype == DataType::Float16 ? DataType::Float32 : dtype, kind);
  BOOST_TEST(CastInto(wide.as_list, ZerosContiguousLike(wide.native, DataType::Float16), 1.0f));
  BOOST_TEST(!CastInto(wide.as_list, ZerosContiguousLike(wide.native, DataType::Float32), 1.0f));
  Lists fp16_dst = Make({{0.0f}}, DataType::Float16, kind);
  BOOST_TEST(CastInto(wide.native, fp16_dst.as_list, 1.0f));
}
}  // namespace

BOOST_AUTO_TEST_CASE(CastsMatchNative) { ForEachCase(&CastsMatchNativeCase); }

BOOST_AUTO_TEST_CASE(MixedListsRunInOneCall) {
  // Native CPU tensors, host-addressable user tensors and user tensors without host bytes in one
  // list: every element is unscaled exactly once.
  const std::vector<std::vector<float>> values = Values();
  Lists host = Make(values, DataType::Float16, {Mode::Defaults, true});
  Lists opaque = Make(values, DataType::BFloat16, {Mode::Overrides, false});
  Lists native = Make(values, DataType::Float32, {Mode::Defaults, false});
  std::vector<TensorPtr> mixed;
  for (std::size_t i = 0; i < values.size(); ++i) {
    mixed.push_back(native.native[i]);
    mixed.push_back(host.as_list[i]);
    mixed.push_back(opaque.as_list[i]);
  }
  BOOST_TEST(!UnscaleAndCheck(mixed, 0.5f));
  UnscaleAndCheck(host.native, 0.5f);
  UnscaleAndCheck(opaque.native, 0.5f);
  ExpectSameElements(host);
  ExpectSameElements(opaque);
  ExpectNoVirtualCalls(host);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::vector<float> halved = values[i];
    for (float& v : halved) {
      v *= 0.5f;
    }
    BOOST_TEST(SameBits(native.native[i]->ToFloatVector(), halved));
  }
}

BOOST_AUTO_TEST_CASE(PerTensorDefaults) {
  // ITensor::UnscaleAndCheck on a library tensor runs its backend's kernel; on host bytes the CPU
  // kernel; else the floats fallback.
  const TensorPtr cpu = FromVector({1.0f, 60000.0f}, {2}, DataType::Float16);
  BOOST_TEST(cpu->UnscaleAndCheck(2.0f));
  BOOST_TEST(std::isinf(cpu->ToFloatVector()[1]));
  UserTensor host({1.0f, 2.0f}, DataType::BFloat16, Mode::Defaults, true);
  BOOST_TEST(!host.UnscaleAndCheck(0.5f));
  BOOST_TEST((host.Floats() == std::vector<float>{0.5f, 1.0f}));
  BOOST_TEST(host.calls.to_float_vector + host.calls.copy_from_floats == 0);
  UserTensor opaque({1.0f, kNaN}, DataType::Float32, Mode::Defaults, false);
  BOOST_TEST(opaque.UnscaleAndCheck(0.5f));
  BOOST_TEST(opaque.calls.copy_from_floats == 1);

  // CopyToFloats: from host bytes without ToFloatVector, else through it; the size is checked.
  std::vector<float> out(2);
  host.CopyToFloats(out);
  BOOST_TEST((out == std::vector<float>{0.5f, 1.0f}));
  BOOST_TEST(host.calls.to_float_vector == 0);
  UserTensor plain({3.0f, 4.0f}, DataType::Float16, Mode::Defaults, false);
  plain.CopyToFloats(out);
  BOOST_TEST((out == std::vector<float>{3.0f, 4.0f}));
  BOOST_TEST(plain.calls.to_float_vector == 1);
  std::vector<float> wrong(3, 7.0f);
  try {
    plain.CopyToFloats(wrong);
    BOOST_FAIL("CopyToFloats took 3 elements for 2");
  } catch (const ArgumentError& error) {
    BOOST_TEST(std::string(error.what()).find("out") != std::string::npos);
  }
  BOOST_TEST((wrong == std::vector<float>(3, 7.0f)));
  cpu->CopyToFloats(out);
  BOOST_TEST((out == std::vector<float>{2.0f, kInf}));
}

BOOST_AUTO_TEST_CASE(TensorMembersMatchNative) {
  // The spec's tensor operations are the library's, not the tensor's: on a user tensor they give
  // the bits they give on the library's tensors (the CPU kernels on host bytes, else the floats),
  // and a new result is a library tensor.
  const std::vector<float> values = {1.5f, -2.25f, 3.0f, 0.1f, 60000.0f};
  for (const DataType dtype : kDtypes) {
    for (const Kind& kind : {Kind{Mode::Defaults, true}, Kind{Mode::Defaults, false}, Kind{Mode::Overrides, false}}) {
      BOOST_TEST_CONTEXT(ToString(dtype) << (kind.host ? " host" : " opaque")
                                         << (kind.mode == Mode::Overrides ? " overrides" : "")) {
        UserTensor user(values, dtype, kind.mode, kind.host);
        const TensorPtr native = FromVector(values, {values.size()}, dtype);
        const TensorPtr products[] = {user.Multiply(0.37f), user.Divide(3.0f), user.Clone()};
        const TensorPtr expected[] = {native->Multiply(0.37f), native->Divide(3.0f), native->Clone()};
        for (std::size_t i = 0; i < 3; ++i) {
          BOOST_TEST(products[i]->Backend() != nullptr);
          BOOST_TEST((products[i]->GetDataType() == dtype));
          BOOST_TEST(SameBits(products[i]->ToFloatVector(), expected[i]->ToFloatVector()), "result " << i);
        }
        for (const DataType to : {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Float8E4M3FN}) {
          BOOST_TEST(SameBits(user.CastTo(to)->ToFloatVector(), native->CastTo(to)->ToFloatVector()));
        }
        BOOST_TEST(!user.HasInf());
        BOOST_TEST(!user.HasNaN());
        BOOST_TEST(!user.HasNonFinite());
        BOOST_TEST(user.SumOfSquares() == native->SumOfSquares(), boost::test_tools::tolerance(1e-6));
        user.MultiplyInPlace(2.0f);
        native->MultiplyInPlace(2.0f);
        BOOST_TEST(SameBits(user.Floats(), native->ToFloatVector()));
        BOOST_TEST(user.UnscaleAndCheck(8.0f) == native->UnscaleAndCheck(8.0f));  // FP16 overflows
        BOOST_TEST(SameBits(user.Floats(), native->ToFloatVector()));

        UserTensor inf({1.0f, -kInf}, dtype, kind.mode, kind.host);
        BOOST_TEST(inf.HasInf());
        BOOST_TEST(!inf.HasNaN());
        BOOST_TEST(inf.HasNonFinite());
        UserTensor nan({kNaN, 1.0f}, dtype, kind.mode, kind.host);
        BOOST_TEST(!nan.HasInf());
        BOOST_TEST(nan.HasNaN());

        // Bad input: the error names the argument, the tensor is left as it was.
        const std::vector<float> before = user.Floats();
        BOOST_CHECK_EXCEPTION(static_cast<void>(user.Divide(0.0f)), ArgumentError, [](const ArgumentError& error) {
          return std::string(error.what()).find("divisor") != std::string::npos;
        });
        BOOST_CHECK_EXCEPTION(
            static_cast<void>(user.CastTo(static_cast<DataType>(99))), ArgumentError,
            [](const ArgumentError& error) { return std::string(error.what()).find("dtype") != std::string::npos; });
        BOOST_TEST(SameBits(user.Floats(), before));
        if (kind.host) {
          BOOST_TEST(user.calls.to_float_vector + user.calls.copy_to_floats + user.calls.copy_from_floats == 0);
        } else {
          BOOST_TEST(user.calls.copy_from_floats == 2);  // MultiplyInPlace and UnscaleAndCheck wrote back
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
