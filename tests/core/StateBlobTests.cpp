// Versioned, checksummed state blobs: round trip and every kind of damage.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/StateBlob.hpp"

using namespace mlframework;
using namespace mlframework::detail;

namespace {

std::vector<std::byte> SampleBlob() {
  BlobWriter writer("test.Kind", 3);
  writer.ScaleStateFields(ScaleState{
      .Scale = 512.0f, .StepsSinceLastOverflow = 7, .ConsecutiveOverflows = 1, .TotalOverflows = 4, .TotalSteps = 90});
  writer.F64(2.5);
  return writer.Finish();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(StateBlobFormat)

BOOST_AUTO_TEST_CASE(RoundTrips) {
  const auto blob = SampleBlob();
  BlobReader reader(blob, "test.Kind", 3);
  const ScaleState state = reader.ScaleStateFields();
  BOOST_TEST(state.Scale == 512.0f);
  BOOST_TEST(state.TotalSteps == 90);
  BOOST_TEST(reader.F64() == 2.5);
  reader.ExpectEnd();
}

BOOST_AUTO_TEST_CASE(RejectsEveryTruncation) {
  const auto blob = SampleBlob();
  for (std::size_t length = 0; length < blob.size(); ++length) {
    BOOST_CHECK_THROW(BlobReader(std::span(blob).first(length), "test.Kind", 3), ArgumentError);
  }
}

BOOST_AUTO_TEST_CASE(RejectsEverySingleBitFlip) {
  const auto blob = SampleBlob();
  for (std::size_t byte = 0; byte < blob.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto damaged = blob;
      damaged[byte] ^= static_cast<std::byte>(1 << bit);
      BOOST_CHECK_THROW(BlobReader(damaged, "test.Kind", 3), ArgumentError);
    }
  }
}

BOOST_AUTO_TEST_CASE(RejectsWrongKindVersionAndTrailingBytes) {
  const auto blob = SampleBlob();
  BOOST_CHECK_THROW(BlobReader(blob, "other.Kind", 3), ArgumentError);
  BOOST_CHECK_THROW(BlobReader(blob, "test.Kind", 4), ArgumentError);
  BlobReader reader(blob, "test.Kind", 3);
  (void)reader.ScaleStateFields();
  BOOST_CHECK_THROW(reader.ExpectEnd(), ArgumentError);
  BOOST_CHECK_THROW(reader.Bytes(100), ArgumentError);
}

BOOST_AUTO_TEST_CASE(RejectsInsaneScaleState) {
  BlobWriter writer("test.Kind", 1);
  writer.ScaleStateFields(ScaleState{.Scale = -1.0f});
  const auto blob = writer.Finish();
  BlobReader reader(blob, "test.Kind", 1);
  BOOST_CHECK_THROW(reader.ScaleStateFields(), ArgumentError);
}

BOOST_AUTO_TEST_CASE(OpensTheFirstVersionThatFramesTheBlob) {
  const auto blob = [](std::uint16_t version) {
    BlobWriter writer("test.Kind", version);
    writer.U8(static_cast<std::uint8_t>(version));
    return writer.Finish();
  };
  for (const std::uint16_t written : std::initializer_list<std::uint16_t>{2, 1}) {
    std::uint16_t version = 0;
    const std::vector<std::byte> bytes = blob(written);
    BlobReader reader = OpenBlobVersion(bytes, "test.Kind", {2, 1}, version);
    BOOST_TEST(version == written);
    BOOST_TEST(reader.U8() == written);
  }
  // A version not listed, or another kind, is the first version's error (naming the parameter).
  std::uint16_t version = 0;
  BOOST_CHECK_EXCEPTION(
      OpenBlobVersion(blob(3), "test.Kind", {2, 1}, version, "blob"), ArgumentError, [](const ArgumentError& e) {
        return e.Parameter() == "blob" && std::string(e.what()).find("expected 2") != std::string::npos;
      });
  BOOST_CHECK_THROW(OpenBlobVersion(blob(2), "test.Other", {2, 1}, version), ArgumentError);
  BOOST_CHECK_THROW(OpenBlobVersion(blob(2), "test.Kind", {}, version), ArgumentError);
  BOOST_TEST(version == 0);
}

BOOST_AUTO_TEST_SUITE_END()
