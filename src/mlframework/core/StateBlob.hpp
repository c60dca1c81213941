#pragma once
// Private: versioned, checksummed byte blobs for scaler and shard state.
//
// Layout: "MLFW" | u16 format version | u16 kind length | kind | u64 payload
// length | payload | u64 FNV-1a of everything before. Integers little-endian.
// A reader validates the whole frame before any field is read, and every
// read is bounds-checked, so a truncated or corrupted blob is an
// ArgumentError and never undefined behaviour. Callers decode into
// temporaries and commit only after the last read succeeds.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/ScalePolicy.hpp>

namespace mlframework::detail {

class BlobWriter {
 public:
  /// Starts a blob of @p kind (e.g. "amp.DynamicLossScaler"), payload version @p version.
  BlobWriter(std::string_view kind, std::uint16_t version);
  void U8(std::uint8_t value);
  void U32(std::uint32_t value);
  void U64(std::uint64_t value);
  void I64(std::int64_t value);
  void F32(float value);
  void F64(double value);
  void Bytes(std::span<const std::byte> bytes);
  void ScaleStateFields(const ScaleState& state);
  /// Closes the frame and returns the blob.
  std::vector<std::byte> Finish();

 private:
  std::string kind_;
  std::uint16_t version_;
  std::vector<std::byte> payload_;
};

class BlobReader {
 public:
  /// Validates the frame (magic, version, kind, length, checksum); ArgumentError naming @p parameter otherwise.
  BlobReader(std::span<const std::byte> blob, std::string_view kind, std::uint16_t version,
             std::string parameter = "state");
  std::uint8_t U8();
  std::uint32_t U32();
  std::uint64_t U64();
  std::int64_t I64();
  float F32();
  double F64();
  /// Reads a byte that must be 0 or 1 (fails naming @p what otherwise).
  bool Flag(const std::string& what);
  /// Reads an int64 that must be >= 0 (fails naming @p what otherwise).
  std::int64_t Count(const std::string& what);
  std::span<const std::byte> Bytes(std::size_t count);
  /// Reads a ScaleState and checks it is sane: finite positive scale, non-negative counters.
  ScaleState ScaleStateFields();
  /// ArgumentError unless every payload byte was read.
  void ExpectEnd() const;
  /// ArgumentError naming the parameter with @p what.
  [[noreturn]] void Fail(const std::string& what) const;

 private:
  std::span<const std::byte> Take(std::size_t count);
  std::span<const std::byte> payload_;
  std::size_t position_ = 0;
  std::string parameter_;
};

/// Opens @p blob as the first of @p versions (newest first) whose frame it has, and sets
/// @p version to it, so a reader still loads the layouts it wrote before; a blob that no version
/// frames is the ArgumentError of the first version.
BlobReader OpenBlobVersion(std::span<const std::byte> blob, std::string_view kind,
                           std::initializer_list<std::uint16_t> versions, std::uint16_t& version,
                           const std::string& parameter = "state");

}  // namespace mlframework::detail
