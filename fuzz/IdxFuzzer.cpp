// Fuzz target: the demo's IDX loader (samples/train_fashion_mnist/IdxReader),
// which reads files a user downloads: gzip decoding, the IDX header and the
// images/labels pairing.
//
// Properties: any bytes are accepted or rejected with fashion_mnist::DataError
// (nothing else escapes, no sanitizer report, no allocation beyond the limits);
// an accepted array holds exactly as many elements as its dimensions say, and
// an accepted split has count * features pixels in [0, 1] and labels < 10.
//
// Input: byte 0 picks the path (0: ParseIdx, 1: Gunzip then ParseIdx,
// 2: MakeSplit over the input cut in two at byte 1), then the file bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "FuzzSupport.hpp"
#include "train_fashion_mnist/IdxReader.hpp"

using mlframework::fuzz::PropertyFailed;

namespace {

// Inflating past this is refused (a gzip bomb must be a DataError, not an OOM).
constexpr std::size_t kMaxInflated = std::size_t{1} << 22;

void CheckArray(const fashion_mnist::IdxArray& array) {
  // Checked product: a wrapped count must not make a huge header look consistent.
  std::size_t count = 1;
  bool overflow = false;
  for (const std::uint32_t dim : array.dims) {
    overflow = overflow || __builtin_mul_overflow(count, std::size_t{dim}, &count);
  }
  if (overflow || array.dims.empty() || array.dims.size() > 4 || array.data.size() != count) {
    PropertyFailed("an accepted IDX array does not match its dimensions");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) {
    return 0;
  }
  const std::span<const std::uint8_t> bytes(data + 2, size - 2);
  try {
    switch (data[0] % 3) {
      case 0:
        CheckArray(fashion_mnist::ParseIdx(bytes, "fuzz.idx"));
        break;
      case 1: {
        const std::vector<std::uint8_t> plain = fashion_mnist::Gunzip(bytes, "fuzz.idx.gz", kMaxInflated);
        if (plain.size() > kMaxInflated) {
          PropertyFailed("Gunzip inflated past its limit");
        }
        CheckArray(fashion_mnist::ParseIdx(plain, "fuzz.idx"));
        break;
      }
      default: {
        const std::size_t cut = std::min<std::size_t>(data[1], bytes.size());
        const auto images = fashion_mnist::ParseIdx(bytes.first(cut), "images.idx");
        const auto labels = fashion_mnist::ParseIdx(bytes.subspan(cut), "labels.idx");
        const fashion_mnist::Split split = fashion_mnist::MakeSplit(images, "images.idx", labels, "labels.idx");
        if (split.images.size() != split.count * split.features || split.labels.size() != split.count) {
          PropertyFailed("an accepted split has the wrong sizes");
        }
        for (const float pixel : split.images) {
          if (!(pixel >= 0.0f && pixel <= 1.0f)) {
            PropertyFailed("a pixel is outside [0, 1]");
          }
        }
        for (const std::uint8_t label : split.labels) {
          if (label >= fashion_mnist::kClasses) {
            PropertyFailed("a label is out of range");
          }
        }
      }
    }
  } catch (const fashion_mnist::DataError&) {
    return 0;  // rejected cleanly
  }
  return 0;
}
