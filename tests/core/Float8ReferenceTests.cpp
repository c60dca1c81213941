// FP8 conversions bit for bit against PyTorch: tests/data/float8_torch_reference.txt holds
// torch's decode of all 256 codes of each format and its `.to(float8_*)` of about 10,000 FP32
// values (ties, subnormals, overflow, specials, random; tests/data/gen_float8_reference.py made
// it, outside CI). Checked on the scalar functions and through the CPU backend's tensors: the
// casts of FP32, FP16 and BF16 tensors into FP8 and back, one tensor at a time and as a list.
// This executable also runs once per instruction set (MLFW_CPU_ISA), so every table's FP8 slots
// are covered.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/FloatBits.hpp>
#include <mlframework/mlframework.hpp>

#ifndef MLFW_FLOAT8_REFERENCE
#error "MLFW_FLOAT8_REFERENCE must name tests/data/float8_torch_reference.txt"
#endif

using namespace mlframework;

namespace {

struct Reference {
  std::vector<std::uint32_t> decode_e4m3;  // [code] -> FP32 bits
  std::vector<std::uint32_t> decode_e5m2;
  std::vector<std::uint32_t> inputs;  // FP32 bits
  std::vector<std::uint8_t> e4m3;     // torch's encoding of inputs[i]
  std::vector<std::uint8_t> e5m2;
};

const Reference& Data() {
  static const Reference kData = [] {
    Reference r;
    r.decode_e4m3.assign(256, 0);
    r.decode_e5m2.assign(256, 0);
    std::ifstream in(MLFW_FLOAT8_REFERENCE);
    BOOST_TEST_REQUIRE(in.good(), "cannot open " << MLFW_FLOAT8_REFERENCE);
    std::string line;
    int decoded = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') {
        continue;
      }
      std::istringstream fields(line);
      std::string kind;
      fields >> kind;
      if (kind == "D") {
        std::string format;
        std::string code;
        std::string bits;
        fields >> format >> code >> bits;
        auto& table = format == "e4m3fn" ? r.decode_e4m3 : r.decode_e5m2;
        table.at(std::stoul(code, nullptr, 16)) = static_cast<std::uint32_t>(std::stoul(bits, nullptr, 16));
        ++decoded;
      } else if (kind == "E") {
        std::string bits;
        std::string bytes;
        fields >> bits >> bytes;
        const auto both = std::stoul(bytes, nullptr, 16);
        r.inputs.push_back(static_cast<std::uint32_t>(std::stoul(bits, nullptr, 16)));
        r.e4m3.push_back(static_cast<std::uint8_t>(both >> 8));
        r.e5m2.push_back(static_cast<std::uint8_t>(both & 0xffu));
      }
    }
    BOOST_TEST_REQUIRE(decoded == 512);
    BOOST_TEST_REQUIRE(r.inputs.size() > 5000u);
    return r;
  }();
  return kData;
}

float FromBits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

const std::vector<std::uint8_t>& ExpectedCast(DataType dtype) {
  return dtype == DataType::Float8E4M3FN ? Data().e4m3 : Data().e5m2;
}

const std::vector<std::uint32_t>& ExpectedDecode(DataType dtype) {
  return dtype == DataType::Float8E4M3FN ? Data().decode_e4m3 : Data().decode_e5m2;
}

std::vector<std::uint8_t> BytesOf(const ITensor& tensor) {
  const auto bytes = tensor.HostBytes();
  std::vector<std::uint8_t> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Counts the mismatches of @p got against torch's bytes for the inputs selected by @p used.
void CheckBytes(const std::vector<std::uint8_t>& got, DataType dtype, const std::vector<std::size_t>& used,
                std::string_view path) {
  const auto& expected = ExpectedCast(dtype);
  BOOST_TEST_REQUIRE(got.size() == used.size());
  int mismatches = 0;
  for (std::size_t k = 0; k < used.size(); ++k) {
    const std::size_t i = used[k];
    if (got[k] != expected[i] && mismatches++ < 10) {
      BOOST_ERROR(path << " " << ToString(dtype) << " of 0x" << std::hex << Data().inputs[i] << ": got 0x"
                       << unsigned{got[k]} << ", torch 0x" << unsigned{expected[i]});
    }
  }
  BOOST_TEST(mismatches == 0, path << " " << ToString(dtype));
}

constexpr DataType kFp8[] = {DataType::Float8E4M3FN, DataType::Float8E5M2};

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8TorchReference)

BOOST_AUTO_TEST_CASE(DecodingMatchesTorchOnEveryCode) {
  for (unsigned c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    BOOST_TEST(detail::FloatAsBits(detail::Float8E4M3FNBitsToFloat(code)) == Data().decode_e4m3[c],
               "e4m3fn code 0x" << std::hex << c);
    BOOST_TEST(detail::FloatAsBits(detail::Float8E5M2BitsToFloat(code)) == Data().decode_e5m2[c],
               "e5m2 code 0x" << std::hex << c);
  }
  // The same through tensors: all 256 codes cast to FP32, one tensor and as a list.
  for (const DataType dtype : kFp8) {
    const TensorPtr codes = Zeros({256}, dtype);
    auto bytes = codes->MutableHostBytes();
    for (unsigned c = 0; c < 256; ++c) {
      bytes[c] = static_cast<std::byte>(c);
    }
    const std::vector<TensorPtr> one{codes};
    for (const TensorPtr& widened : {codes->CastTo(DataType::Float32), Cast(one, DataType::Float32)[0]}) {
      const std::vector<float> values = widened->ToFloatVector();
      for (unsigned c = 0; c < 256; ++c) {
        BOOST_TEST(detail::FloatAsBits(values[c]) == ExpectedDecode(dtype)[c], ToString(dtype)
                                                                                   << " code 0x" << std::hex << c);
      }
    }
    std::vector<float> direct(256);
    codes->CopyToFloats(direct);
    for (unsigned c = 0; c < 256; ++c) {
      BOOST_TEST(detail::FloatAsBits(direct[c]) == ExpectedDecode(dtype)[c], ToString(dtype)
                                                                                 << " code 0x" << std::hex << c);
    }
  }
}

BOOST_AUTO_TEST_CASE(EncodingMatchesTorchOnTheSample) {
  const Reference& r = Data();
  std::vector<std::size_t> all(r.inputs.size());
  std::vector<float> values(r.inputs.size());
  for (std::size_t i = 0; i < r.inputs.size(); ++i) {
    all[i] = i;
    values[i] = FromBits(r.inputs[i]);
  }
  std::vector<std::uint8_t> scalar_e4m3(values.size());
  std::vector<std::uint8_t> scalar_e5m2(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    scalar_e4m3[i] = detail::FloatToFloat8E4M3FNBits(values[i]);
    scalar_e5m2[i] = detail::FloatToFloat8E5M2Bits(values[i]);
  }
  CheckBytes(scalar_e4m3, DataType::Float8E4M3FN, all, "scalar");
  CheckBytes(scalar_e5m2, DataType::Float8E5M2, all, "scalar");
  const TensorPtr source = FromVector(values, {values.size()}, DataType::Float32);
  const std::vector<TensorPtr> list{source};
  for (const DataType dtype : kFp8) {
    CheckBytes(BytesOf(*source->CastTo(dtype)), dtype, all, "CastTo");
    CheckBytes(BytesOf(*FromVector(values, {values.size()}, dtype)), dtype, all, "FromVector");
    CheckBytes(BytesOf(*Cast(list, dtype)[0]), dtype, all, "Cast");
    const TensorPtr target = Zeros({values.size()}, dtype);
    const std::vector<TensorPtr> targets{target};
    (void)CastInto(list, targets);
    CheckBytes(BytesOf(*target), dtype, all, "CastInto");
    std::vector<std::uint8_t> converted(values.size());
    ConvertHostElements(values.data(), DataType::Float32, converted.data(), dtype, values.size());
    CheckBytes(converted, dtype, all, "ConvertHostElements");
  }
}

// FP16 and BF16 tensors narrow to FP8 through their exact FP32 value: wherever a sample input is
// a binary16 (bfloat16) value, the FP16 (BF16) tensor's cast gives torch's byte of that value.
BOOST_AUTO_TEST_CASE(HalfAndBFloat16SourcesMatchTorch) {
  const Reference& r = Data();
  for (const DataType wide : {DataType::Float16, DataType::BFloat16}) {
    std::vector<float> exact;
    std::vector<std::size_t> used;
    for (std::size_t i = 0; i < r.inputs.size(); ++i) {
      const float v = FromBits(r.inputs[i]);
      const float rounded =
          wide == DataType::Float16 ? static_cast<float>(Float16(v)) : static_cast<float>(BFloat16(v));
      if (detail::FloatAsBits(rounded) == r.inputs[i]) {
        exact.push_back(v);
        used.push_back(i);
      }
    }
    BOOST_TEST(used.size() > 1500u, ToString(wide) << " " << used.size());
    const TensorPtr source = FromVector(exact, {exact.size()}, wide);
    const std::vector<TensorPtr> list{source};
    for (const DataType dtype : kFp8) {
      CheckBytes(BytesOf(*source->CastTo(dtype)), dtype, used, ToString(wide));
      CheckBytes(BytesOf(*Cast(list, dtype)[0]), dtype, used, ToString(wide));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
