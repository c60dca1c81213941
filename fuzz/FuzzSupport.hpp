#pragma once
// Helpers shared by the fuzz targets.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

namespace mlframework::fuzz {

/// Reads the fuzzer's bytes front to back; past the end every read yields zero.
class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }
  /// The bytes not read yet, as std::byte.
  std::vector<std::byte> Rest() {
    std::vector<std::byte> rest;
    rest.reserve(size_ - position_);
    while (position_ < size_) {
      rest.push_back(static_cast<std::byte>(data_[position_++]));
    }
    return rest;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

/// Overwrites the last 8 bytes of a state blob with the FNV-1a checksum of the
/// rest (the frame's own rule, see StateBlob.hpp). Without this nearly every
/// mutation is rejected at the checksum and the parser behind it is never
/// reached; the checksum test itself is covered by the unsealed inputs.
inline void ResealChecksum(std::vector<std::byte>& blob) {
  if (blob.size() < 8) {
    return;
  }
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const std::size_t body = blob.size() - 8;
  for (std::size_t i = 0; i < body; ++i) {
    hash ^= static_cast<std::uint64_t>(blob[i]);
    hash *= 0x100000001b3ULL;
  }
  for (std::size_t i = 0; i < 8; ++i) {
    blob[body + i] = static_cast<std::byte>((hash >> (8 * i)) & 0xffU);
  }
}

/// Stops the run with a message: a broken property, reported by libFuzzer as a crash.
[[noreturn]] inline void PropertyFailed(const char* what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

}  // namespace mlframework::fuzz
