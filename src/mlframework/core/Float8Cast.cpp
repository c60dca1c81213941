#include <mlframework/core/Float8Cast.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/DeviceFactory.hpp"
#include "mlframework/core/HostAlias.hpp"
#include "mlframework/core/TensorGroups.hpp"

// The free functions of Float8Cast.hpp: check everything, put host tensors without a backend on
// the CPU kernels (HostAlias.hpp), check that one backend and one device hold every tensor of the
// call, and hand the lists to that backend in one call.

namespace mlframework {

namespace {

std::string Indexed(const char* name, std::size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

using detail::RequireNonNull;
using detail::RequirePairs;

bool IsWide(DataType dtype) {
  return dtype == DataType::Float32 || dtype == DataType::Float16 || dtype == DataType::BFloat16;
}

// Every entry of @p tensors has a dtype @p accepted takes; else ArgumentError naming it.
template <typename Accepted>
void RequireDtypes(std::span<const TensorPtr> tensors, const char* name, Accepted&& accepted, const char* expected) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DataType dtype = tensors[i]->GetDataType();
    if (!accepted(dtype)) {
      throw ArgumentError(Indexed(name, i),
                          "has dtype " + std::string(ToString(dtype)) + "; expected " + std::string(expected));
    }
  }
}

// A per-tensor tensor (scale, scale_inv, amax): FP32 of @p count elements.
void RequirePerTensor(const TensorPtr& tensor, const char* name, std::size_t count) {
  if (!tensor) {
    throw ArgumentNullError(name);
  }
  if (tensor->GetDataType() != DataType::Float32) {
    throw ArgumentError(name, "has dtype " + std::string(ToString(tensor->GetDataType())) +
                                  "; expected Float32 (one FP32 value per tensor)");
  }
  if (tensor->Size() != count) {
    throw ArgumentError(name, "has " + std::to_string(tensor->Size()) + " elements; expected " + std::to_string(count) +
                                  " (one per tensor of the list)");
  }
}

std::string Where(const ITensor& tensor) {
  return tensor.GetDevice().ToString() + " (backend '" + std::string(tensor.Backend()->Name()) + "')";
}

// The tensors of one call, each on a backend, checked to share the one of @p anchor (the
// per-tensor tensor, named @p anchor_name) and its device.
class Call {
 public:
  Call(const TensorPtr& anchor, const char* anchor_name)
      : anchor_(detail::OnABackend(anchor, anchor_name)), anchor_name_(anchor_name) {}

  const TensorBackend& Backend() const { return *anchor_->Backend(); }
  ITensor& Anchor() const { return *anchor_; }

  // @p tensor on a backend, checked to be on the anchor's backend and device; @p name() names it
  // in an error (built only then: a call takes thousands of tensors).
  template <typename Name>
  TensorPtr Take(const TensorPtr& tensor, Name&& name) const {
    if (tensor->Backend() == anchor_->Backend() && tensor->GetDevice() == anchor_->GetDevice()) {
      return tensor;
    }
    TensorPtr resolved = detail::OnABackend(tensor, name());
    if (resolved->Backend() != anchor_->Backend() || resolved->GetDevice() != anchor_->GetDevice()) {
      throw ArgumentError(name(), "is on " + Where(*resolved) + " but " + anchor_name_ + " is on " + Where(*anchor_) +
                                      ": every tensor of the call must be on one device");
    }
    return resolved;
  }

  std::vector<TensorPtr> TakeAll(std::span<const TensorPtr> tensors, const char* name) const {
    std::vector<TensorPtr> taken;
    taken.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      taken.push_back(Take(tensors[i], [&] { return Indexed(name, i); }));
    }
    return taken;
  }

 private:
  TensorPtr anchor_;
  std::string anchor_name_;
};

void RequireFloatingPoint(std::span<const TensorPtr> tensors, const char* name) {
  RequireDtypes(
      tensors, name, [](DataType d) { return IsValid(d); }, "Float32, Float16, BFloat16, Float8E4M3FN or Float8E5M2");
}

}  // namespace

void Amax(std::span<const TensorPtr> tensors, const TensorPtr& amax) {
  RequireNonNull(tensors, "tensors");
  RequireFloatingPoint(tensors, "tensors");
  RequirePerTensor(amax, "amax", tensors.size());
  const Call call(amax, "amax");
  const std::vector<TensorPtr> taken = call.TakeAll(tensors, "tensors");
  if (taken.empty()) {
    return;
  }
  call.Backend().AmaxInto(detail::Pointers<const ITensor*>(taken), call.Anchor());
}

float ListAmax(std::span<const TensorPtr> tensors) {
  RequireNonNull(tensors, "tensors");
  RequireFloatingPoint(tensors, "tensors");
  if (tensors.empty()) {
    return 0.0f;
  }
  const Call call(tensors.front(), "tensors[0]");
  const std::vector<TensorPtr> taken = call.TakeAll(tensors, "tensors");
  TensorPtr amax;
  try {
    amax = call.Backend().Allocate({tensors.size()}, DataType::Float32, call.Anchor().GetDevice());
  } catch (const InvalidOperationError&) {
    // A backend that cannot allocate (a user's): TensorBackend's defaults, which run on host
    // memory, write the per-tensor amaxes into a host tensor.
    amax = detail::BackendOf(Device::CPU()).Allocate({tensors.size()}, DataType::Float32, Device::CPU());
  }
  call.Backend().AmaxInto(detail::Pointers<const ITensor*>(taken), *amax);
  float result = 0.0f;
  for (const float a : amax->ToFloatVector()) {
    if (std::isnan(a)) {
      return a;
    }
    result = a > result ? a : result;
  }
  return result;
}

void ScaledCastToFloat8(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, const TensorPtr& scale,
                        const TensorPtr& amax) {
  RequirePairs(src, dst);
  RequireDtypes(src, "src", IsWide, "Float32, Float16 or BFloat16 (the cast's source)");
  RequireDtypes(dst, "dst", IsFloat8, "Float8E4M3FN or Float8E5M2 (the cast's destination)");
  RequirePerTensor(scale, "scale", src.size());
  if (amax) {
    RequirePerTensor(amax, "amax", src.size());
  }
  const Call call(scale, "scale");
  const std::vector<TensorPtr> taken_src = call.TakeAll(src, "src");
  const std::vector<TensorPtr> taken_dst = call.TakeAll(dst, "dst");
  const TensorPtr taken_amax = amax ? call.Take(amax, [] { return std::string("amax"); }) : nullptr;
  if (taken_src.empty()) {
    return;
  }
  call.Backend().ScaledCastToFloat8(detail::Pointers<const ITensor*>(taken_src), detail::Pointers<ITensor*>(taken_dst),
                                    call.Anchor(), taken_amax.get());
}

void DequantizeFloat8(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, const TensorPtr& scale_inv) {
  RequirePairs(src, dst);
  RequireDtypes(src, "src", IsFloat8, "Float8E4M3FN or Float8E5M2 (the dequantization's source)");
  RequireDtypes(dst, "dst", IsWide, "Float32, Float16 or BFloat16 (the dequantization's destination)");
  RequirePerTensor(scale_inv, "scale_inv", src.size());
  const Call call(scale_inv, "scale_inv");
  const std::vector<TensorPtr> taken_src = call.TakeAll(src, "src");
  const std::vector<TensorPtr> taken_dst = call.TakeAll(dst, "dst");
  if (taken_src.empty()) {
    return;
  }
  call.Backend().DequantizeFloat8(detail::Pointers<const ITensor*>(taken_src), detail::Pointers<ITensor*>(taken_dst),
                                  call.Anchor());
}

}  // namespace mlframework
