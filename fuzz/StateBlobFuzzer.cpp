// Fuzz target: the state-blob reader behind every LoadStateDict.
//
// Properties: any bytes are either accepted or rejected with ArgumentError
// (nothing else escapes, no sanitizer report), and a blob that is accepted and
// read to its end re-encodes with BlobWriter to exactly the same bytes.
//
// Input: byte 0 flags (bit 0: re-seal the checksum), byte 1 the length of a
// read program (ops, one byte each: which field to read next; a Bytes op takes
// its count from the following byte), then the blob itself.
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "FuzzSupport.hpp"
#include "mlframework/core/StateBlob.hpp"

using mlframework::ArgumentError;
using mlframework::ScaleState;
using mlframework::detail::BlobReader;
using mlframework::detail::BlobWriter;

namespace {

constexpr const char* kKind = "fuzz.Kind";
constexpr std::uint16_t kVersion = 1;
constexpr std::size_t kMaxProgram = 16;

using Field = std::variant<std::uint8_t, std::uint32_t, std::uint64_t, std::int64_t, float, double,
                           std::vector<std::byte>, ScaleState>;

Field ReadField(BlobReader& reader, std::uint8_t op, std::uint8_t count) {
  switch (op % 8) {
    case 0:
      return reader.U8();
    case 1:
      return reader.U32();
    case 2:
      return reader.U64();
    case 3:
      return reader.I64();
    case 4:
      return reader.F32();
    case 5:
      return reader.F64();
    case 6: {
      const auto bytes = reader.Bytes(count);
      return std::vector<std::byte>(bytes.begin(), bytes.end());
    }
    default:
      return reader.ScaleStateFields();
  }
}

void WriteField(BlobWriter& writer, const Field& field) {
  std::visit(
      [&writer](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::uint8_t>) {
          writer.U8(value);
        } else if constexpr (std::is_same_v<T, std::uint32_t>) {
          writer.U32(value);
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          writer.U64(value);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          writer.I64(value);
        } else if constexpr (std::is_same_v<T, float>) {
          writer.F32(value);
        } else if constexpr (std::is_same_v<T, double>) {
          writer.F64(value);
        } else if constexpr (std::is_same_v<T, std::vector<std::byte>>) {
          writer.Bytes(value);
        } else {
          writer.ScaleStateFields(value);
        }
      },
      field);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  const std::uint8_t flags = input.Byte();
  const std::size_t program_length = input.Byte() % (kMaxProgram + 1);
  std::vector<std::uint8_t> program;
  for (std::size_t i = 0; i < program_length; ++i) {
    program.push_back(input.Byte());
  }
  std::vector<std::byte> blob = input.Rest();
  if ((flags & 1U) != 0) {
    mlframework::fuzz::ResealChecksum(blob);
  }

  std::vector<Field> fields;
  try {
    BlobReader reader(blob, kKind, kVersion);
    for (std::size_t i = 0; i < program.size(); ++i) {
      const std::uint8_t count = i + 1 < program.size() ? program[i + 1] : 0;
      fields.push_back(ReadField(reader, program[i], count));
      if (program[i] % 8 == 6) {
        ++i;  // the count byte is part of the Bytes op
      }
    }
    reader.ExpectEnd();
  } catch (const ArgumentError&) {
    return 0;  // rejected cleanly: the only allowed failure
  }

  // Accepted and fully read: the writer must reproduce the blob bit for bit.
  BlobWriter writer(kKind, kVersion);
  for (const Field& field : fields) {
    WriteField(writer, field);
  }
  if (writer.Finish() != blob) {
    mlframework::fuzz::PropertyFailed("an accepted blob does not re-encode to the same bytes");
  }
  return 0;
}
