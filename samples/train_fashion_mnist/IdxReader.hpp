#pragma once
// Reading Fashion-MNIST: IDX files (optionally gzip-compressed), validated
// field by field so that a missing, truncated or corrupted file gives an
// error naming the file and what is wrong, never a crash.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fashion_mnist {

/// A file that cannot be used, with a message naming it and the problem.
class DataError : public std::runtime_error {
 public:
  /// Creates an error whose message is "<file>: <problem>".
  DataError(std::string_view file, std::string_view problem);
};

/// An IDX array of unsigned bytes (type code 0x08): its dimensions and elements.
struct IdxArray {
  std::vector<std::uint32_t> dims;  ///< Extents, outermost first.
  std::vector<std::uint8_t> data;   ///< Row-major elements.
};

/// Parses the bytes of an uncompressed IDX file named @p name (used in messages).
/// Checks the magic number (0, 0, type 0x08, 1 to 4 dimensions), that every
/// dimension is non-zero, and that the data is exactly as long as the header says.
/// Throws DataError otherwise. Pure: no I/O, safe on any input.
IdxArray ParseIdx(std::span<const std::uint8_t> bytes, std::string_view name);

/// Decompresses gzip @p bytes of the file @p name; bytes that do not start with
/// the gzip magic are returned unchanged (uncompressed IDX). Throws DataError for
/// a corrupted or truncated stream, or one inflating past @p max_bytes.
std::vector<std::uint8_t> Gunzip(std::span<const std::uint8_t> bytes, std::string_view name,
                                 std::size_t max_bytes = std::size_t{1} << 30);

/// Reads and parses @p path (gzip or plain). DataError when missing or unreadable.
IdxArray ReadIdxFile(const std::filesystem::path& path);

/// Images as floats in [0, 1] and their labels.
struct Split {
  std::size_t count = 0;             ///< Number of examples.
  std::size_t features = 0;          ///< Pixels per image (rows * cols).
  std::vector<float> images;         ///< count x features, row-major.
  std::vector<std::uint8_t> labels;  ///< count labels in [0, kClasses).
};

/// Number of classes in Fashion-MNIST.
inline constexpr std::size_t kClasses = 10;

/// Checks an images array (3 dimensions) and a labels array (1 dimension, same
/// count, every label < kClasses) and builds a Split. DataError naming the file otherwise.
Split MakeSplit(const IdxArray& images, std::string_view images_name, const IdxArray& labels,
                std::string_view labels_name);

/// The training and test splits of Fashion-MNIST.
struct Dataset {
  Split train;  ///< 60000 examples in the real data set.
  Split test;   ///< 10000 examples.
};

/// Loads `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]` from @p dir (the
/// `.gz` file is preferred). Throws DataError naming the file and the problem.
Dataset LoadFashionMnist(const std::filesystem::path& dir);

}  // namespace fashion_mnist
