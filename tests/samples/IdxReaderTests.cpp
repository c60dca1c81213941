// The Fashion-MNIST IDX reader: every way a file can be missing, truncated or
// corrupted gives a DataError naming the file and the problem, never a crash.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "IdxReader.hpp"

using namespace fashion_mnist;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes Idx(const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes bytes = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      bytes.push_back(static_cast<std::uint8_t>(d >> shift));
    }
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

Bytes Gzip(const Bytes& raw) {
  z_stream stream{};
  BOOST_REQUIRE(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&stream, static_cast<uLong>(raw.size())) + 64);
  stream.next_in = const_cast<Bytef*>(raw.data());
  stream.avail_in = static_cast<uInt>(raw.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  BOOST_REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

Bytes Sequence(std::size_t n, std::size_t modulo) {
  Bytes data(n);
  for (std::size_t i = 0; i < n; ++i) {
    data[i] = static_cast<std::uint8_t>(i % modulo);
  }
  return data;
}

// Runs @p action, expects a DataError whose message contains every one of @p parts.
template <class F>
void ExpectError(F&& action, const std::vector<std::string>& parts) {
  try {
    action();
    BOOST_FAIL("expected a DataError");
  } catch (const DataError& error) {
    const std::string message = error.what();
    for (const std::string& part : parts) {
      BOOST_TEST(message.find(part) != std::string::npos, "\"" << message << "\" should contain \"" << part << "\"");
    }
  }
}

// A temporary directory holding a small, valid Fashion-MNIST-shaped data set.
struct DataDir {
  fs::path dir;
  DataDir() {
    dir = fs::temp_directory_path() / ("mlfw_idx_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    Write("train-images-idx3-ubyte.gz", Gzip(Idx({6, 2, 3}, Sequence(36, 256))));
    Write("train-labels-idx1-ubyte.gz", Gzip(Idx({6}, Sequence(6, 10))));
    Write("t10k-images-idx3-ubyte.gz", Gzip(Idx({4, 2, 3}, Sequence(24, 256))));
    Write("t10k-labels-idx1-ubyte.gz", Gzip(Idx({4}, Sequence(4, 10))));
  }
  ~DataDir() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;
  void Write(const std::string& name, const Bytes& bytes) const {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::string Path(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(IdxReader)

BOOST_AUTO_TEST_CASE(ParsesAValidArray) {
  const IdxArray array = ParseIdx(Idx({2, 3}, {1, 2, 3, 4, 5, 6}), "ok");
  BOOST_TEST(array.dims == (std::vector<std::uint32_t>{2, 3}), boost::test_tools::per_element());
  BOOST_TEST(array.data == (Bytes{1, 2, 3, 4, 5, 6}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(RejectsBadHeadersNamingTheFile) {
  ExpectError([] { ParseIdx(Bytes{0, 0}, "f.idx"); }, {"f.idx", "truncated", "magic"});
  ExpectError([] { ParseIdx(Bytes{0x1f, 0x8b, 8, 1}, "f.idx"); }, {"f.idx", "not an IDX file"});
  ExpectError([] { ParseIdx(Bytes{0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}, "f.idx"); }, {"f.idx", "element type 0xd"});
  ExpectError([] { ParseIdx(Bytes{0, 0, 8, 0}, "f.idx"); }, {"f.idx", "0 dimensions"});
  ExpectError([] { ParseIdx(Bytes{0, 0, 8, 9}, "f.idx"); }, {"f.idx", "9 dimensions"});
  ExpectError([] { ParseIdx(Bytes{0, 0, 8, 3, 0, 0, 0, 1}, "f.idx"); }, {"f.idx", "truncated header"});
  ExpectError([] { ParseIdx(Idx({2, 0}, {}), "f.idx"); }, {"f.idx", "dimension 1 is 0"});
}

BOOST_AUTO_TEST_CASE(RejectsDataShorterOrLongerThanTheHeaderSays) {
  ExpectError(
      [] {
        ParseIdx(Idx({2, 3}, {1, 2, 3, 4, 5}), "short.idx");
      },
      {"short.idx", "truncated", "6 bytes", "has 5"});
  ExpectError([] { ParseIdx(Idx({2, 3}, Bytes(7)), "long.idx"); }, {"long.idx", "1 bytes after"});
  // Dimensions whose product overflows are caught before any size arithmetic goes wrong.
  ExpectError([] { ParseIdx(Idx({0xffffffffu, 0xffffffffu, 0xffffffffu}, {}), "huge.idx"); }, {"huge.idx"});
}

BOOST_AUTO_TEST_CASE(GunzipRoundTripsAndPassesPlainBytesThrough) {
  const Bytes raw = Idx({3, 4}, Sequence(12, 7));
  BOOST_TEST(Gunzip(Gzip(raw), "x.gz") == raw, boost::test_tools::per_element());
  BOOST_TEST(Gunzip(raw, "x") == raw, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(GunzipRejectsTruncatedCorruptedAndOversizedStreams) {
  const Bytes gz = Gzip(Idx({100, 10}, Sequence(1000, 251)));
  const Bytes truncated(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  ExpectError([&] { Gunzip(truncated, "t.gz"); }, {"t.gz", "truncated gzip stream"});
  const Bytes header_only(gz.begin(), gz.begin() + 10);
  ExpectError([&] { Gunzip(header_only, "h.gz"); }, {"h.gz", "truncated"});
  Bytes corrupted = gz;
  for (std::size_t i = 10; i < corrupted.size() - 8; ++i) {
    corrupted[i] = static_cast<std::uint8_t>(corrupted[i] ^ 0xa5u);
  }
  ExpectError([&] { Gunzip(corrupted, "c.gz"); }, {"c.gz"});
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xffu;  // inside the CRC-32 trailer
  ExpectError([&] { Gunzip(bad_crc, "crc.gz"); }, {"crc.gz", "corrupted"});
  Bytes trailing = gz;
  trailing.push_back(0);
  ExpectError([&] { Gunzip(trailing, "tail.gz"); }, {"tail.gz", "after the end"});
  ExpectError([&] { Gunzip(gz, "big.gz", 100); }, {"big.gz", "more than 100 bytes"});
}

BOOST_AUTO_TEST_CASE(RandomAndMutatedInputsOnlyEverThrowDataError) {
  std::mt19937 rng(7);
  const Bytes gz = Gzip(Idx({20, 5}, Sequence(100, 256)));
  std::size_t parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes input;
    if (trial % 2 == 0) {
      input.resize(rng() % 64);
      for (auto& b : input) {
        b = static_cast<std::uint8_t>(rng());
      }
      if (input.size() >= 4 && trial % 4 == 0) {
        input[0] = 0;
        input[1] = 0;
        input[2] = 8;
        input[3] = static_cast<std::uint8_t>(1 + rng() % 4);
      }
    } else {
      input = gz;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        input[rng() % input.size()] = static_cast<std::uint8_t>(rng());
      }
      input.resize(input.size() - rng() % 8);
    }
    try {
      const IdxArray array = ParseIdx(Gunzip(input, "fuzz", 1u << 20), "fuzz");
      std::size_t product = 1;
      for (const auto d : array.dims) {
        product *= d;
      }
      BOOST_TEST(array.data.size() == product);
      ++parsed;
    } catch (const DataError& error) {
      BOOST_TEST(std::string(error.what()).rfind("fuzz: ", 0) == 0u);
    }
  }
  BOOST_TEST_MESSAGE(parsed << " of 3000 random inputs parsed");
}

BOOST_AUTO_TEST_CASE(LoadsAValidDataSetFromADirectory) {
  const DataDir data;
  const Dataset dataset = LoadFashionMnist(data.dir);
  BOOST_TEST(dataset.train.count == 6u);
  BOOST_TEST(dataset.test.count == 4u);
  BOOST_TEST(dataset.train.features == 6u);
  BOOST_TEST(dataset.train.images[1] == 1.0f / 255.0f);
  BOOST_TEST(dataset.test.labels[3] == 3);
}

BOOST_AUTO_TEST_CASE(MissingFilesAreNamed) {
  const DataDir data;
  fs::remove(data.dir / "t10k-labels-idx1-ubyte.gz");
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("t10k-labels-idx1-ubyte.gz"), "missing", "--data"});
  ExpectError([] { LoadFashionMnist("/nonexistent-mlfw-dir"); }, {"/nonexistent-mlfw-dir/train-images", "missing"});
  ExpectError([&] { ReadIdxFile(data.dir); }, {data.dir.string(), "not a regular file"});
}

BOOST_AUTO_TEST_CASE(TruncatedAndCorruptedFilesAreNamed) {
  const DataDir data;
  const Bytes gz = Gzip(Idx({6, 2, 3}, Sequence(36, 256)));
  data.Write("train-images-idx3-ubyte.gz", Bytes(gz.begin(), gz.begin() + 20));
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("train-images-idx3-ubyte.gz"), "truncated"});

  // A gzip stream that is complete but whose IDX content is cut short.
  data.Write("train-images-idx3-ubyte.gz", Gzip(Idx({6, 2, 3}, Sequence(30, 256))));
  ExpectError([&] { LoadFashionMnist(data.dir); },
              {data.Path("train-images-idx3-ubyte.gz"), "truncated", "36 bytes", "has 30"});

  data.Write("train-images-idx3-ubyte.gz", Bytes{'h', 'e', 'l', 'l', 'o'});
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("train-images-idx3-ubyte.gz"), "not an IDX file"});

  data.Write("train-images-idx3-ubyte.gz", {});
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("train-images-idx3-ubyte.gz"), "0 bytes"});
}

BOOST_AUTO_TEST_CASE(InconsistentFilesAreNamed) {
  const DataDir data;
  data.Write("train-labels-idx1-ubyte.gz", Gzip(Idx({6}, Bytes{0, 1, 2, 12, 4, 5})));
  ExpectError([&] { LoadFashionMnist(data.dir); },
              {data.Path("train-labels-idx1-ubyte.gz"), "label 12 at index 3", "0..9"});

  data.Write("train-labels-idx1-ubyte.gz", Gzip(Idx({5}, Sequence(5, 10))));
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("train-labels-idx1-ubyte.gz"), "5 labels", "6 images"});

  data.Write("train-labels-idx1-ubyte.gz", Gzip(Idx({6, 2, 3}, Sequence(36, 10))));
  ExpectError([&] { LoadFashionMnist(data.dir); }, {data.Path("train-labels-idx1-ubyte.gz"), "expected 1"});

  data.Write("train-labels-idx1-ubyte.gz", Gzip(Idx({6}, Sequence(6, 10))));
  data.Write("t10k-images-idx3-ubyte.gz", Gzip(Idx({4, 3, 3}, Sequence(36, 256))));
  ExpectError([&] { LoadFashionMnist(data.dir); }, {"t10k-images", "9 pixels", "training images 6"});
}

BOOST_AUTO_TEST_CASE(UncompressedFilesAreReadToo) {
  const DataDir data;
  fs::remove(data.dir / "train-images-idx3-ubyte.gz");
  data.Write("train-images-idx3-ubyte", Idx({6, 2, 3}, Sequence(36, 256)));
  BOOST_TEST(LoadFashionMnist(data.dir).train.count == 6u);
}

BOOST_AUTO_TEST_SUITE_END()
