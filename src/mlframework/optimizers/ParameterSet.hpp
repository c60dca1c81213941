#pragma once
// Private: what SGD and Adam share. Parameters, their FP32 master weights,
// the gradients set by SetGradients, fused reading of gradients as FP32 and
// the fused write-back of rounded weights into FP16/BF16 parameters.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"

namespace mlframework::optimizers::detail {

// Below this many elements one thread is faster than waking the team.
inline constexpr std::ptrdiff_t kParallelThreshold = 1 << 16;

class ParameterSet {
 public:
  // Validates (non-empty, no null tensor, valid dtype; BF16 host tensors for BF16 @p masters,
  // else ArgumentError naming the parameter) and creates the FP32 masters or the remainders.
  ParameterSet(GradientMap parameters, MasterFormat masters);

  const GradientMap& Parameters() const noexcept { return parameters_; }
  const GradientMap& Masters() const noexcept { return masters_; }
  const GradientMap& Gradients() const noexcept { return gradients_; }
  std::size_t Count() const noexcept { return list_.size(); }
  std::size_t Size(std::size_t i) const noexcept { return list_[i]->Size(); }
  const std::string& Name(std::size_t i) const noexcept { return names_[i]; }
  // Index of parameter @p name; ArgumentError naming @p parameter when there is none.
  std::size_t IndexOf(const std::string& name, const std::string& parameter) const;

  // Names and shapes must match the parameters one to one; nothing changes on error.
  void SetGradients(const GradientMap& gradients);
  // InvalidOperationError naming @p optimizer when SetGradients was never called.
  void RequireGradients(const char* optimizer) const;

  MasterFormat MasterKind() const noexcept { return master_format_; }
  // Parameter i's master weights in FP32 (exact for every MasterFormat).
  std::vector<float> MasterValues(std::size_t i) const;
  // The masters, in parameter order (the BF16 parameters themselves under BF16 masters).
  std::span<const TensorPtr> MasterList() const noexcept { return master_list_; }
  // OptimizerStepLists::ElementOffsets in parameter order: empty until SetElementOffsets().
  std::span<const std::uint64_t> ElementOffsets() const noexcept { return element_offsets_; }
  // Parameter i's entry of ElementOffsets() (0 while it is empty).
  std::uint64_t ElementOffset(std::size_t i) const noexcept {
    return element_offsets_.empty() ? 0 : element_offsets_[i];
  }
  // IOptimizerState::SetElementOffsets(): ArgumentError naming `offsets`, nothing changed, for an
  // unknown name or an offset whose parameter's indices would pass 2^64 - 1.
  void SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets);
  // BFloat16Remainder: the remainders, in parameter order; else empty.
  std::span<const TensorPtr> Remainders() const noexcept { return remainders_; }
  // The gradients as FP32 host tensors, in parameter order. FP32 gradients in host memory are
  // read where they are; every other gradient is converted by one fused CastInto into reused
  // FP32 buffers.
  std::vector<TensorPtr> Float32Gradients();
  // Rounds the masters into the parameters that are not updated in place (one fused CastInto).
  void WriteBack();
  // Parameter i when a fused step writes its rounded value in the same pass (FP16/BF16, not its
  // own master, in memory the host addresses), else null. Asked at every step: a tensor of a
  // framework may hand out other memory later.
  TensorPtr FusedCopy(std::size_t i) const noexcept;
  // FusedCopy() of every parameter under FP32 masters; empty under BF16 masters (the parameters
  // are the masters).
  std::vector<TensorPtr> FusedCopies() const;
  // WriteBack() for the parameters FusedCopy() does not cover (none, after a fused step, unless
  // some parameters live in memory the host cannot address).
  void WriteBackUnfused();

  // Master weights: u8 MasterFormat, count, then per parameter its name, element count and FP32 values.
  void SaveMasters(mlframework::detail::BlobWriter& writer) const;
  // Reads what SaveMasters wrote (@p with_format false: an older blob, FP32 masters without the
  // format byte), checking names and sizes against this set and, without @p convert, that the
  // format is this set's; the values are checked with CheckMasters() (no change made).
  std::vector<std::vector<float>> ReadMasters(mlframework::detail::BlobReader& reader, bool with_format,
                                              bool convert) const;
  // ArgumentError naming `state` for a value BF16 masters cannot hold (none for FP32 masters).
  void CheckMasters(const std::vector<std::vector<float>>& values) const;
  // Commits checked FP32 master values: FP32 masters copied (and rounded into FP16/BF16 parameters),
  // BF16 masters rounded to nearest even, or split exactly with their remainders.
  void CommitMasters(const std::vector<std::vector<float>>& values);
  // The checks of ImportStoredState(): @p steps >= 0 (else ArgumentError naming `steps`), and
  // @p state holding exactly this set's names, each with masters of its size, checked by
  // CheckMasters(), and @p vectors state vectors (else naming `state`; @p optimizer names the
  // optimizer). Returns the masters in parameter order.
  std::vector<std::vector<float>> CheckedMasters(const std::map<std::string, amp::OptimizerStoredParameterState>& state,
                                                 std::int64_t steps, std::size_t vectors, const char* optimizer) const;
  // ArgumentError naming @p parameter unless a map of @p count names, asked by @p has, holds
  // exactly this set's names (RestoreState() of the optimizers).
  void RequireSameNames(std::size_t count, const std::function<bool(const std::string&)>& has,
                        const std::string& parameter) const;
  // ArgumentError naming @p parameter unless @p length is parameter i's size (@p what names the state).
  void RequireLength(std::size_t length, std::size_t i, const std::string& what, const std::string& parameter) const;

 private:
  // Makes the missing FP32 scratch buffers, all in one contiguous buffer.
  void AllocateScratch();

  MasterFormat master_format_;
  GradientMap parameters_;
  GradientMap masters_;
  GradientMap gradients_;
  std::vector<std::string> names_;
  std::vector<TensorPtr> list_;           // parameters in name order
  std::vector<TensorPtr> master_list_;    // masters in name order
  std::vector<bool> in_place_;            // parameter i is its own master
  std::vector<TensorPtr> gradient_list_;  // gradients in name order
  std::vector<TensorPtr> scratch_;        // FP32 buffers for gradients read through CastInto
  std::vector<TensorPtr> remainders_;     // BFloat16Remainder: 16-bit remainders in name order
  // Empty, or one per parameter in name order (SetElementOffsets()).
  std::vector<std::uint64_t> element_offsets_;
};

// The elements of an FP32 tensor in host memory (a master, a scratch buffer, an optimizer state).
std::span<float> Floats(ITensor& tensor);
// The 16-bit elements of a two-byte tensor in host memory (BF16 masters, remainders), as raw bits.
std::span<std::uint16_t> Halves(ITensor& tensor);

// Name written into a blob (length-prefixed).
void WriteName(mlframework::detail::BlobWriter& writer, const std::string& name);
std::string ReadName(mlframework::detail::BlobReader& reader);
// A float vector (length-prefixed), and its reader with an expected length.
void WriteFloats(mlframework::detail::BlobWriter& writer, std::span<const float> values);
std::vector<float> ReadFloats(mlframework::detail::BlobReader& reader, std::size_t expected, const std::string& what);
// The options' checks: ArgumentError naming @p parameter unless @p value is finite and > 0,
// finite and >= 0, or in [0, 1).
using mlframework::detail::RequireNonNegative;
using mlframework::detail::RequirePositive;
using mlframework::detail::Show;
void RequireFraction(double value, const char* parameter);

// Options read from a blob must pass Validate(); the blob's reader names the problem otherwise.
template <typename Options>
void ValidateLoaded(const Options& options, mlframework::detail::BlobReader& reader) {
  try {
    options.Validate();
  } catch (const ArgumentError& error) {
    reader.Fail(std::string("holds invalid options: ") + error.what());
  }
}

}  // namespace mlframework::optimizers::detail
