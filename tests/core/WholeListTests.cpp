// How the free functions of MultiTensor.hpp hand a whole list to a backend (TensorBackend's
// Read and Write with a list that is not Grouped), and the CPU backend's kept plans seen
// through those entry points.
#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>

using namespace mlframework;

namespace {

// A backend that records what it is handed. It takes whole lists for UnscaleAndCheck (its
// answer: true) and declines them for every other operation, whose grouped lists it counts.
class RecordingBackend final : public TensorBackend {
 public:
  std::string_view Name() const noexcept override { return "recording"; }
  std::optional<ReadPassResult> Read(TensorListView tensors, const ReadPassOptions& /*options*/) const override {
    if (!tensors.Grouped) {
      return std::nullopt;
    }
    span_tensors += tensors.Tensors.size();
    return ReadPassResult{};
  }
  std::optional<WritePassResult> Write(TensorListView src, TensorListView /*dst*/,
                                       const WritePassOptions& options) const override {
    if (!src.Grouped) {
      if (options.Op == WriteOp::Scale && options.Check && !options.Amax) {
        whole_list = src.Tensors.data();
        return WritePassResult{.FoundNonFinite = true};
      }
      return std::nullopt;
    }
    span_tensors += src.Tensors.size();
    return WritePassResult{};
  }

  mutable const TensorPtr* whole_list = nullptr;
  mutable std::size_t span_tensors = 0;
};

// A CPU tensor inside, the RecordingBackend outside.
class RecordedTensor final : public ITensor {
 public:
  RecordedTensor(TensorPtr inner, const RecordingBackend* backend) : inner_(std::move(inner)), backend_(backend) {}
  DataType GetDataType() const override { return inner_->GetDataType(); }
  Device GetDevice() const override { return inner_->GetDevice(); }
  const Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override { return inner_->ToFloatVector(); }
  void CopyFromFloats(std::span<const float> values) override { inner_->CopyFromFloats(values); }
  const TensorBackend* Backend() const noexcept override { return backend_; }

 private:
  TensorPtr inner_;
  const RecordingBackend* backend_;
};

std::vector<TensorPtr> RecordedList(const RecordingBackend& backend, std::size_t count) {
  std::vector<TensorPtr> list;
  for (std::size_t i = 0; i < count; ++i) {
    list.push_back(std::make_shared<RecordedTensor>(Zeros({4}, DataType::Float32), &backend));
  }
  return list;
}

std::vector<TensorPtr> CpuList(std::size_t count, DataType dtype) {
  std::vector<TensorPtr> list;
  for (std::size_t i = 0; i < count; ++i) {
    list.push_back(FromVector({1.0f, 2.0f, 3.0f}, {3}, dtype));
  }
  return list;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(WholeLists)

BOOST_AUTO_TEST_CASE(DefaultsTakeNoList) {
  const RecordingBackend backend;
  const TensorBackend& base = backend;
  const auto list = RecordedList(backend, 3);
  BOOST_TEST(!base.TensorBackend::Read({list, false}, {}).has_value());
  BOOST_TEST(!base.TensorBackend::Read({list, false}, {.SumOfSquares = true}).has_value());
  BOOST_TEST(!base.TensorBackend::Write({list, false}, {}, {.Op = WriteOp::Scale}).has_value());
  BOOST_TEST(
      !base.TensorBackend::Write({list, false}, {list, false}, {.Op = WriteOp::Cast, .Check = true}).has_value());
  BOOST_TEST(!base.TensorBackend::Write({list, false}, {list, false}, {.Op = WriteOp::Cast}).has_value());
  BOOST_TEST(backend.span_tensors == 0u);
}

BOOST_AUTO_TEST_CASE(TheFirstTensorsBackendGetsTheWholeList) {
  const RecordingBackend backend;
  const auto list = RecordedList(backend, 5);
  // Taken: the backend's answer, for the caller's own array, with no span call.
  BOOST_TEST(UnscaleAndCheck(list, 0.5f));
  BOOST_TEST(backend.whole_list == list.data());
  BOOST_TEST(backend.span_tensors == 0u);
  // Declined: the list is walked and handed over as a span.
  BOOST_TEST(!HasNonFinite(list));
  BOOST_TEST(backend.span_tensors == 5u);
  ScaleInPlace(list, 2.0f);
  BOOST_TEST(backend.span_tensors == 10u);
}

BOOST_AUTO_TEST_CASE(CpuBackendDeclinesListsItCannotRun) {
  const TensorBackend& cpu = backends::cpu::Backend();
  const RecordingBackend other;
  auto list = CpuList(3, DataType::Float16);
  BOOST_TEST(!cpu.Read({{}, false}, {}).has_value());
  list.push_back(RecordedList(other, 1)[0]);
  BOOST_TEST(!cpu.Read({list, false}, {}).has_value());
  list.back() = nullptr;
  BOOST_TEST(!cpu.Write({list, false}, {}, {.Op = WriteOp::Scale, .Check = true}).has_value());
  list.pop_back();
  const std::optional<ReadPassResult> read = cpu.Read({list, false}, {});
  BOOST_TEST((read.has_value() && !read->FoundNonFinite));
  // Through the free functions the general path still reports the null entry.
  list.push_back(nullptr);
  BOOST_CHECK_THROW(HasNonFinite(list), ArgumentNullError);
}

namespace {

// The cast of kept lists, offered before core's checks: nullopt when the CPU backend does not know them.
std::optional<WritePassResult> KnownCast(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  return backends::cpu::Backend().Write({src, false}, {dst, false},
                                        {.Op = WriteOp::Cast, .Factor = factor, .Check = true});
}

}  // namespace

// A cast's lists of 64 tensors and more (source and destination together) are kept from their second planning on and
// taken without checks from the third call; a destroyed tensor drops them.
BOOST_AUTO_TEST_CASE(KeptCastListsUntilATensorDies) {
  const auto src = CpuList(64, DataType::Float16);
  auto dst = CpuList(64, DataType::Float32);
  BOOST_TEST(!KnownCast(src, dst, 1.0f).has_value());
  for (int call = 0; call < 2; ++call) {
    BOOST_TEST(!CastInto(src, dst, 0.5f));
  }
  // The kept plan says where the tensors lie, never what they hold.
  src[5]->CopyFromFloats(std::vector<float>{1.0f, 65504.0f, 4.0f});
  const std::optional<WritePassResult> kept = KnownCast(src, dst, 2.0f);
  BOOST_TEST((kept.has_value() && !kept->FoundNonFinite));
  BOOST_TEST(dst[5]->ToFloatVector() == (std::vector<float>{2.0f, 131008.0f, 8.0f}));
  const std::optional<WritePassResult> overflowed = KnownCast(src, dst, 1e38f);  // 65504e38 overflows FP32
  BOOST_TEST((overflowed.has_value() && overflowed->FoundNonFinite));
  // Lists of fewer than 64 tensors in all (31 pairs) are never kept.
  const std::span<const TensorPtr> short_src(src.data(), 31);
  const std::span<const TensorPtr> short_dst(dst.data(), 31);
  for (int call = 0; call < 3; ++call) {
    BOOST_TEST(!CastInto(short_src, short_dst, 1.0f));
  }
  BOOST_TEST(!KnownCast(short_src, short_dst, 1.0f).has_value());
  // A tensor of the kept lists dies: nothing kept is used again.
  dst[63] = FromVector({0.0f, 0.0f, 0.0f}, {3}, DataType::Float32);
  BOOST_TEST(!KnownCast(src, dst, 1.0f).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
