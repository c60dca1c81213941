#include <mlframework/core/HostScaling.hpp>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/ListPasses.hpp"

namespace mlframework {

namespace {

// Non-owning shared pointers (the aliasing constructor with no owner allocates nothing), so
// the raw-pointer kernels can run core's list functions; the caller keeps the tensors alive.
template <typename Pointer>
std::vector<TensorPtr> Borrowed(std::span<Pointer const> tensors) {
  std::vector<TensorPtr> list;
  list.reserve(tensors.size());
  for (Pointer tensor : tensors) {
    list.emplace_back(TensorPtr(), const_cast<ITensor*>(tensor));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  return list;
}

HostScaleState& HostState(DeviceScaleState& state) {
  auto* host = dynamic_cast<HostScaleState*>(&state);
  if (host == nullptr) {
    throw ArgumentError("state", "is a state in " + state.GetDevice().ToString() +
                                     " memory, but a host scaling backend needs a HostScaleState");
  }
  return *host;
}

// HostScaling(): the kernels are core's list passes, which run each tensor's own backend where
// it has one and the per-tensor virtual operations where it has none.
class GenericHostScaling final : public HostScalingBackend {
 public:
  std::string_view Name() const noexcept override { return "host"; }
  std::optional<WritePassResult> Write(TensorListView src, TensorListView dst,
                                       const WritePassOptions& options) const override {
    return detail::WritePass(src.Tensors, dst.Tensors, options);
  }
};

// @p options' pass by @p backend over host tensors its caller holds as raw pointers.
template <typename Src, typename Dst>
WritePassResult WriteOn(const TensorBackend& backend, std::span<Src const> src, std::span<Dst const> dst,
                        const WritePassOptions& options) {
  const std::vector<TensorPtr> src_list = Borrowed(src);
  const std::vector<TensorPtr> dst_list = Borrowed(dst);
  if (const std::optional<WritePassResult> result = backend.Write({src_list, true}, {dst_list, true}, options)) {
    return *result;
  }
  throw InvalidOperationError("the " + std::string(backend.Name()) + " backend declined a write pass over its tensors");
}

// Records a pass's flag, and its amax when it took one, into @p host.
void Record(HostScaleState& host, const WritePassResult& result, bool amax) {
  host.Record(result.FoundNonFinite);
  if (amax) {
    host.RecordAmax(result.Amax);
  }
}

// The unscale of @p host's scale, with the amax while it is tracked.
WritePassOptions Unscale(const HostScaleState& host, WriteOp op) {
  const bool amax = host.AmaxTracking();
  return {.Op = op, .Factor = InverseScale(host.CurrentScale()), .Check = true, .Amax = amax};
}

}  // namespace

HostScalingBackend::~HostScalingBackend() = default;

std::unique_ptr<DeviceScaleState> HostScalingBackend::CreateScaleState(Device /*device*/, const ScalePolicy& policy,
                                                                       const ScaleState& initial) const {
  return std::make_unique<HostScaleState>(policy, initial);
}

void HostScalingBackend::ScaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const {
  WriteOn(*this, tensors, std::span<ITensor* const>(),
          {.Op = WriteOp::Scale, .Factor = HostState(state).CurrentScale()});
}

// Each unscale picks the amax pass or the plain one once (never per element): without tracking
// the kernels are exactly the plain ones. The checks never take the amax (DeviceScaleState, "Amax").

void HostScalingBackend::UnscaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  const WritePassOptions options = Unscale(host, WriteOp::Scale);
  Record(host, WriteOn(*this, tensors, std::span<ITensor* const>(), options), options.Amax);
}

void HostScalingBackend::CastUnscaledWithState(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                               DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  const WritePassOptions options = Unscale(host, WriteOp::Cast);
  Record(host, WriteOn(*this, src, dst, options), options.Amax);
}

void HostScalingBackend::CheckWithState(std::span<const ITensor* const> tensors, DeviceScaleState& state) const {
  HostState(state).Record(mlframework::HasNonFinite(Borrowed(tensors)));
}

void HostScalingBackend::FlagToTensor(const DeviceScaleState& state, TensorPtr& out) const {
  const auto* host_state = dynamic_cast<const HostScaleState*>(&state);
  if (host_state == nullptr) {
    throw ArgumentError("state", "is a state in " + state.GetDevice().ToString() +
                                     " memory, but a host scaling backend needs a HostScaleState");
  }
  const HostScaleState& host = *host_state;
  const std::size_t count = host.AmaxTracking() ? 2 : 1;
  const std::array<float, 2> values{host.FoundInf() ? 1.0f : 0.0f, host.Amax()};  // a host state: no wait
  if (!out || out->GetDataType() != DataType::Float32 || out->Size() != count || !out->GetDevice().IsCPU()) {
    out = Zeros({count});
  }
  out->CopyFromFloats(std::span<const float>(values.data(), count));
}

void HostScalingBackend::FlagFromTensor(DeviceScaleState& state, const ITensor& in) const {
  HostScaleState& host = HostState(state);
  const std::size_t count = host.AmaxTracking() ? 2 : 1;
  if (in.GetDataType() != DataType::Float32 || in.Size() != count || !in.GetDevice().IsCPU()) {
    throw ArgumentError("in", "must be an FP32 host tensor of " + std::to_string(count) + " element(s), got " +
                                  std::to_string(in.Size()) + " elements of " +
                                  std::string(ToString(in.GetDataType())) + " on " + in.GetDevice().ToString());
  }
  const std::vector<float> values = in.ToFloatVector();
  host.ClearFoundInf();
  host.Record(values[0] != 0.0f);
  if (count == 2) {
    host.SetAmax(values[1]);
  }
}

void HostScalingBackend::UpdateScale(DeviceScaleState& state) const { HostState(state).Update(); }

void HostScalingBackend::UnscaleListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  const WritePassOptions options = Unscale(host, WriteOp::Scale);
  Record(host, detail::WritePass(tensors, {}, options), options.Amax);
}

void HostScalingBackend::CastUnscaledListWithState(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                   DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  const WritePassOptions options = Unscale(host, WriteOp::Cast);
  Record(host, detail::WritePass(src, dst, options), options.Amax);
}

void HostScalingBackend::CheckListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  HostState(state).Record(mlframework::HasNonFinite(tensors));
}

TensorPtr HostScalingBackend::ScaledLoss(const ITensor& loss, DeviceScaleState& state) const {
  return loss.Multiply(HostState(state).CurrentScale());
}

std::vector<TensorPtr> HostScalingBackend::Float32Outputs(std::span<const TensorPtr> like) const {
  return ZerosContiguousLike(like, DataType::Float32);
}

const HostScalingBackend& HostScaling() noexcept {
  static const GenericHostScaling kBackend;
  return kBackend;
}

}  // namespace mlframework
