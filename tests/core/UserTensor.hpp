#pragma once
// A framework's own tensor for the tests of the generic path (tensors without a backend): FP32,
// FP16 or BF16 elements in host memory it owns, which it may or may not expose through
// HostStorage(), with the one-pass CopyToFloats either overridden or left to ITensor's default.
// It counts the calls of each virtual, so a test can tell which path the library took.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::testing {

/// How many times each virtual ran.
struct VirtualCalls {
  int to_float_vector = 0;
  int copy_from_floats = 0;
  int copy_to_floats = 0;  ///< calls that reached the override (Mode::Overrides)
};

/// Whether the tensor overrides CopyToFloats or keeps ITensor's defaults.
enum class Mode { Defaults, Overrides };

class UserTensor final : public ITensor {
 public:
  /// @p host: HostStorage() returns the elements. @p misalign: the elements start this many
  /// bytes into the allocation (exposed as they are, so the library must not run kernels on them
  /// when that breaks the element alignment). @p host_bytes_short: HostStorage() returns one
  /// element fewer than Size() (a buggy tensor the library must not trust).
  UserTensor(const std::vector<float>& values, DataType dtype, Mode mode, bool host, std::size_t misalign = 0,
             bool host_bytes_short = false)
      : dtype_(dtype),
        mode_(mode),
        host_(host),
        short_(host_bytes_short),
        misalign_(misalign),
        shape_{values.size()},
        storage_(values.size() * ElementSize(dtype) + misalign + 8) {
    ConvertHostElements(values.data(), DataType::Float32, Data(), dtype_, values.size());
  }

  VirtualCalls calls;

  DataType GetDataType() const override { return dtype_; }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return shape_[0]; }
  std::vector<float> ToFloatVector() const override {
    ++const_cast<UserTensor*>(this)->calls.to_float_vector;
    return Floats();
  }
  void CopyFromFloats(std::span<const float> values) override {
    ++calls.copy_from_floats;
    if (values.size() != Size()) {
      throw ArgumentError("values", "has " + std::to_string(values.size()) + " elements");
    }
    Store(values);
  }
  void CopyToFloats(std::span<float> out) const override {
    if (mode_ == Mode::Defaults) {
      ITensor::CopyToFloats(out);
      return;
    }
    ++const_cast<UserTensor*>(this)->calls.copy_to_floats;
    if (out.size() != Size()) {
      throw ArgumentError("out", "has " + std::to_string(out.size()) + " elements");
    }
    ConvertHostElements(Data(), dtype_, out.data(), DataType::Float32, Size());
  }
  /// The elements as floats, read without counting a call.
  std::vector<float> Floats() const {
    std::vector<float> values(Size());
    ConvertHostElements(Data(), dtype_, values.data(), DataType::Float32, Size());
    return values;
  }

 protected:
  std::span<std::byte> HostStorage() const noexcept override {
    if (!host_) {
      return {};
    }
    const std::size_t bytes = (Size() - (short_ && Size() > 0 ? 1 : 0)) * ElementSize(dtype_);
    return {const_cast<std::byte*>(static_cast<const std::byte*>(Data())), bytes};
  }

 private:
  const void* Data() const { return storage_.data() + misalign_; }
  void* Data() { return storage_.data() + misalign_; }
  void Store(std::span<const float> values) {
    ConvertHostElements(values.data(), DataType::Float32, Data(), dtype_, values.size());
  }

  DataType dtype_;
  Mode mode_;
  bool host_;
  bool short_;
  std::size_t misalign_;
  Shape shape_;
  std::vector<std::byte> storage_;
};

}  // namespace mlframework::testing
