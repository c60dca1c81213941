#include "IdxReader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace fashion_mnist {

namespace {

constexpr std::size_t kHeaderFixedBytes = 4;  // two zero bytes, type code, dimension count
constexpr std::uint8_t kUnsignedByteType = 0x08;
constexpr std::size_t kMaxDims = 4;

std::uint32_t ReadBigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

std::string DimsToString(const std::vector<std::uint32_t>& dims) {
  std::ostringstream out;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    out << (i == 0 ? "" : " x ") << dims[i];
  }
  return out.str();
}

}  // namespace

DataError::DataError(std::string_view file, std::string_view problem)
    : std::runtime_error(std::string(file) + ": " + std::string(problem)) {}

IdxArray ParseIdx(std::span<const std::uint8_t> bytes, std::string_view name) {
  if (bytes.size() < kHeaderFixedBytes) {
    throw DataError(name,
                    "truncated: " + std::to_string(bytes.size()) + " bytes, too short for the 4-byte IDX magic number");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    std::ostringstream problem;
    problem << "not an IDX file: magic number starts with 0x" << std::hex << int{bytes[0]} << " 0x" << int{bytes[1]}
            << ", expected 0x0 0x0";
    throw DataError(name, problem.str());
  }
  if (bytes[2] != kUnsignedByteType) {
    std::ostringstream problem;
    problem << "unsupported IDX element type 0x" << std::hex << int{bytes[2]} << ", expected 0x8 (unsigned byte)";
    throw DataError(name, problem.str());
  }
  const std::size_t ndims = bytes[3];
  if (ndims == 0 || ndims > kMaxDims) {
    throw DataError(
        name, "corrupted header: " + std::to_string(ndims) + " dimensions, expected 1 to " + std::to_string(kMaxDims));
  }
  const std::size_t header_bytes = kHeaderFixedBytes + 4 * ndims;
  if (bytes.size() < header_bytes) {
    throw DataError(name, "truncated header: " + std::to_string(bytes.size()) + " bytes, the " + std::to_string(ndims) +
                              " dimensions need " + std::to_string(header_bytes));
  }
  IdxArray array;
  array.dims.resize(ndims);
  std::size_t elements = 1;
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::uint32_t extent = ReadBigEndian32(bytes.data() + kHeaderFixedBytes + 4 * d);
    array.dims[d] = extent;
    if (extent == 0) {
      throw DataError(name, "corrupted header: dimension " + std::to_string(d) + " is 0");
    }
    if (elements > std::numeric_limits<std::size_t>::max() / extent) {
      throw DataError(name, "corrupted header: dimensions " + DimsToString(array.dims) + " overflow");
    }
    elements *= extent;
  }
  const std::size_t data_bytes = bytes.size() - header_bytes;
  if (data_bytes < elements) {
    throw DataError(name, "truncated: header says " + DimsToString(array.dims) + " = " + std::to_string(elements) +
                              " bytes of data, the file has " + std::to_string(data_bytes));
  }
  if (data_bytes > elements) {
    throw DataError(name, "corrupted: " + std::to_string(data_bytes - elements) + " bytes after the " +
                              std::to_string(elements) + " bytes of data the header (" + DimsToString(array.dims) +
                              ") announces");
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header_bytes), bytes.end());
  return array;
}

std::vector<std::uint8_t> Gunzip(std::span<const std::uint8_t> bytes, std::string_view name, std::size_t max_bytes) {
  const bool gzip = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
  if (!gzip) {
    return {bytes.begin(), bytes.end()};
  }
  z_stream stream{};
  // 15 + 16: gzip wrapper only, largest window.
  if (inflateInit2(&stream, 15 + 16) != Z_OK) {
    throw DataError(name, "zlib could not start inflating (out of memory)");
  }
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> chunk(std::size_t{1} << 20);
  std::size_t consumed = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (stream.avail_in == 0 && consumed < bytes.size()) {
      const std::size_t take = std::min<std::size_t>(bytes.size() - consumed, std::numeric_limits<uInt>::max());
      // zlib's API takes a non-const pointer but does not write through next_in.
      stream.next_in = const_cast<Bytef*>(bytes.data() + consumed);
      stream.avail_in = static_cast<uInt>(take);
      consumed += take;
    }
    stream.next_out = chunk.data();
    stream.avail_out = static_cast<uInt>(chunk.size());
    status = inflate(&stream, Z_NO_FLUSH);
    const std::size_t produced = chunk.size() - stream.avail_out;
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT || status == Z_MEM_ERROR || status == Z_STREAM_ERROR) {
      const std::string message = stream.msg != nullptr ? stream.msg : "unknown zlib error";
      inflateEnd(&stream);
      throw DataError(name,
                      "corrupted gzip data after " + std::to_string(out.size()) + " decompressed bytes: " + message);
    }
    if (out.size() + produced > max_bytes) {
      inflateEnd(&stream);
      throw DataError(name, "decompresses to more than " + std::to_string(max_bytes) + " bytes");
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(produced));
    if (status == Z_BUF_ERROR ||
        (status == Z_OK && produced == 0 && stream.avail_in == 0 && consumed == bytes.size())) {
      inflateEnd(&stream);
      throw DataError(name, "truncated gzip stream: it ends after " + std::to_string(bytes.size()) +
                                " compressed bytes (" + std::to_string(out.size()) +
                                " decompressed) without its end marker");
    }
  }
  const std::size_t trailing = stream.avail_in + (bytes.size() - consumed);
  inflateEnd(&stream);
  if (trailing != 0) {
    throw DataError(name, "corrupted: " + std::to_string(trailing) + " bytes after the end of the gzip stream");
  }
  return out;
}

IdxArray ReadIdxFile(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw DataError(name, "missing (no such file)");
  }
  if (!std::filesystem::is_regular_file(path, error)) {
    throw DataError(name, "not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(name, std::string("cannot be opened: ") + std::strerror(errno));
  }
  std::vector<std::uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw DataError(name, "read error");
  }
  const std::vector<std::uint8_t> bytes = Gunzip(raw, name);
  return ParseIdx(bytes, name);
}

Split MakeSplit(const IdxArray& images, std::string_view images_name, const IdxArray& labels,
                std::string_view labels_name) {
  if (images.dims.size() != 3) {
    throw DataError(images_name, "has " + std::to_string(images.dims.size()) +
                                     " dimensions, expected 3 (count x rows x columns): is it a labels file?");
  }
  if (labels.dims.size() != 1) {
    throw DataError(labels_name, "has " + std::to_string(labels.dims.size()) +
                                     " dimensions, expected 1 (count): is it an images file?");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(labels_name, "has " + std::to_string(labels.dims[0]) + " labels but " + std::string(images_name) +
                                     " has " + std::to_string(images.dims[0]) + " images");
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kClasses) {
      throw DataError(labels_name, "label " + std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                                       " is out of range 0.." + std::to_string(kClasses - 1));
    }
  }
  Split split;
  split.count = images.dims[0];
  split.features = std::size_t{images.dims[1]} * images.dims[2];
  split.images.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), split.images.begin(),
                 [](std::uint8_t pixel) { return static_cast<float>(pixel) / 255.0f; });
  split.labels = labels.data;
  return split;
}

namespace {

std::filesystem::path Locate(const std::filesystem::path& dir, const std::string& stem) {
  std::filesystem::path gz = dir / (stem + ".gz");
  std::error_code error;
  if (std::filesystem::exists(gz, error)) {
    return gz;
  }
  std::filesystem::path plain = dir / stem;
  if (std::filesystem::exists(plain, error)) {
    return plain;
  }
  throw DataError(gz.string(), "missing (no such file, nor " + plain.filename().string() +
                                   "); install Debian's dataset-fashion-mnist or pass --data DIR");
}

Split LoadSplit(const std::filesystem::path& dir, const std::string& prefix) {
  const std::filesystem::path images_path = Locate(dir, prefix + "-images-idx3-ubyte");
  const std::filesystem::path labels_path = Locate(dir, prefix + "-labels-idx1-ubyte");
  const IdxArray images = ReadIdxFile(images_path);
  const IdxArray labels = ReadIdxFile(labels_path);
  return MakeSplit(images, images_path.string(), labels, labels_path.string());
}

}  // namespace

Dataset LoadFashionMnist(const std::filesystem::path& dir) {
  Dataset dataset;
  dataset.train = LoadSplit(dir, "train");
  dataset.test = LoadSplit(dir, "t10k");
  if (dataset.train.features != dataset.test.features) {
    throw DataError((dir / "t10k-images-idx3-ubyte").string(), "images have " + std::to_string(dataset.test.features) +
                                                                   " pixels, the training images " +
                                                                   std::to_string(dataset.train.features));
  }
  return dataset;
}

}  // namespace fashion_mnist
