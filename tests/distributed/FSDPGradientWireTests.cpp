// FSDP's gradient wire formats: the FP8 block wire's codec (bound, non-finite blocks), the
// all-to-all it travels through, its reduce-scatter and all-reduce against FP32 (within the
// analytic bound, the same bits on every rank and every run), the BF16 wire within its bound,
// an Inf on one rank detected by the overflow agreement, and bad configurations; on 1, 2 or 4
// ranks.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include "NonFinite.hpp"
#include "distributed/DistributedTestUtil.hpp"
#include "mlframework/distributed/Float8BlockCodec.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;
using mlfw_test::kInf;

namespace {

constexpr std::size_t kBlock = dist::kFloat8WireBlock;

// Values of every rank's part, spread over eight decades (so small ones land in E4M3's
// subnormals after the block scale), different on every rank, with a zero block.
std::vector<float> WireValues(std::size_t count, int rank) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const float t = std::sin(0.37f * static_cast<float>(i) + 0.9f * static_cast<float>(rank + 1));
    v[i] = t * std::pow(10.0f, 2.0f - static_cast<float>((i * 7 + static_cast<std::size_t>(rank)) % 9));
  }
  if (count >= 3 * kBlock) std::fill(v.begin() + 2 * kBlock, v.begin() + 3 * kBlock, 0.0f);
  return v;
}

// The amax of the block of part @p part (parts of @p count values) that holds element @p i.
float BlockAmax(const std::vector<float>& values, std::size_t count, std::size_t part, std::size_t i) {
  const std::size_t first = part * count + (i / kBlock) * kBlock;
  const std::size_t last = std::min(part * count + count, first + kBlock);
  float amax = 0.0f;
  for (std::size_t j = first; j < last; ++j) amax = std::max(amax, std::fabs(values[j]));
  return amax;
}

// The analytic bound of Float8BlockReduce.hpp for output element @p i: the sum over the ranks'
// values x_p = everything[p][chunk * count + i] of max(|x_p| 2^-4, a_p 2^-17), plus the FP32
// additions' (P - 1) 2^-24 sum |x_p|.
double WireBound(const std::vector<std::vector<float>>& everything, std::size_t chunk, std::size_t count,
                 std::size_t i) {
  double bound = 0.0;
  double magnitude = 0.0;
  for (const auto& values : everything) {
    const double x = std::fabs(values[chunk * count + i]);
    const double amax = BlockAmax(values, count, chunk, i);
    bound += std::max(x * 0x1p-4, amax * 0x1p-17);
    magnitude += x;
  }
  return bound + static_cast<double>(everything.size() - 1) * 0x1p-24 * magnitude;
}

// Every rank's @p mine, gathered (FP32, exact).
std::vector<std::vector<float>> GatherAll(dist::IProcessGroup& group, const std::vector<float>& mine) {
  const auto world = static_cast<std::size_t>(group.WorldSize());
  const TensorPtr in = mlframework::FromVector(mine, {mine.size()});
  const TensorPtr out = mlframework::Zeros({mine.size() * world});
  group.AllGather(*in, *out);
  const std::vector<float> flat = out->ToFloatVector();
  std::vector<std::vector<float>> all(world);
  for (std::size_t p = 0; p < world; ++p) {
    all[p].assign(flat.begin() + static_cast<std::ptrdiff_t>(p * mine.size()),
                  flat.begin() + static_cast<std::ptrdiff_t>((p + 1) * mine.size()));
  }
  return all;
}

// @p call throws ArgumentError naming @p parameter, with @p value in its message.
template <typename Fn>
void CheckArgumentError(Fn&& call, const std::string& parameter, const std::string& value = "") {
  try {
    call();
    BOOST_ERROR("no ArgumentError for " << parameter);
  } catch (const mlframework::ArgumentError& error) {
    BOOST_TEST(error.Parameter() == parameter);
    BOOST_TEST(std::string(error.what()).find(value) != std::string::npos, error.what());
  }
}

std::vector<std::uint32_t> Bits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(values[i]);
  return bits;
}

// What rank-order decoding of every rank's encoded chunk @p chunk gives, computed here from the
// gathered inputs with the codec alone (no communication): the bits every rank must receive.
std::vector<float> RankOrderSum(const std::vector<std::vector<float>>& everything, std::size_t chunk,
                                std::size_t count) {
  const std::size_t blocks = dist::detail::Float8BlockCount(count);
  std::vector<std::uint8_t> codes(everything.size() * count);
  std::vector<float> scales(everything.size() * blocks);
  for (std::size_t p = 0; p < everything.size(); ++p) {
    dist::detail::EncodeFloat8Blocks(everything[p].data() + chunk * count, count, codes.data() + p * count,
                                     scales.data() + p * blocks);
  }
  std::vector<float> out(count);
  dist::detail::DecodeSumFloat8Blocks(codes.data(), scales.data(), static_cast<int>(everything.size()), count,
                                      out.data());
  return out;
}

// What rank @p from sends to rank @p to at @p i of the chunk: integers below 16 with a sign
// pattern, exact in every dtype (E4M3 included).
float Sent(int from, std::size_t to, std::size_t i) {
  const auto value = static_cast<float>((from * 4) + static_cast<int>(to));
  return i % 2 == 0 ? value : -value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpGradientWire)

// One part: every decoded value within max(|x| 2^-4, amax 2^-17) of its input, block scales
// powers of two that put the block's amax in (224, 448], a zero block exact, and a block with
// an infinity or a NaN decoded as NaN throughout while its neighbours stay finite.
BOOST_AUTO_TEST_CASE(CodecBoundScalesAndNonFiniteBlocks) {
  const std::size_t count = 5 * kBlock + 17;  // a short last block
  std::vector<float> values = WireValues(count, 0);
  values[4 * kBlock + 3] = -kInf;
  values[kBlock + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::size_t blocks = dist::detail::Float8BlockCount(count);
  BOOST_TEST_REQUIRE(blocks == 6u);
  std::vector<std::uint8_t> codes(count);
  std::vector<float> scales(blocks);
  dist::detail::EncodeFloat8Blocks(values.data(), count, codes.data(), scales.data());
  std::vector<float> decoded(count);
  dist::detail::DecodeSumFloat8Blocks(codes.data(), scales.data(), 1, count, decoded.data());
  for (std::size_t b = 0; b < blocks; ++b) {
    const bool poisoned = b == 1 || b == 4;
    BOOST_TEST_CONTEXT("block " << b) {
      BOOST_TEST(std::isnan(scales[b]) == poisoned);
      const float amax = BlockAmax(values, count, 0, b * kBlock);
      if (!poisoned && amax > 0.0f) {
        int e = 0;
        BOOST_TEST(std::frexp(scales[b], &e) == 0.5f);  // a power of two
        BOOST_TEST(amax / scales[b] > 224.0f);
        BOOST_TEST(amax / scales[b] <= 448.0f);
      }
      for (std::size_t i = b * kBlock; i < std::min(count, (b + 1) * kBlock); ++i) {
        // The codes are the library's plain E4M3FN cast of the scaled value (core/Float8Bits.hpp).
        if (!poisoned) BOOST_TEST(codes[i] == mlframework::detail::FloatToFloat8E4M3FNBits(values[i] / scales[b]));
        if (poisoned) {
          BOOST_TEST(std::isnan(decoded[i]));
          continue;
        }
        const double bound = std::max(std::fabs(values[i]) * 0x1p-4, static_cast<double>(amax) * 0x1p-17);
        BOOST_TEST(std::fabs(static_cast<double>(decoded[i]) - values[i]) <= bound, "element " << i);
      }
    }
  }
  for (std::size_t i = 2 * kBlock; i < 3 * kBlock; ++i) BOOST_TEST(decoded[i] == 0.0f);
}

// Every float magnitude pattern a block can hold (a sweep of bit patterns from 0 up to the
// block's amax, both signs) encodes to the library's E4M3FN cast of its scaled value.
BOOST_AUTO_TEST_CASE(CodesMatchTheLibraryCast) {
  std::vector<float> values;
  for (std::uint32_t bits = 0; bits <= 0x43e00000u; bits += 0x1ffu) {  // up to 448
    values.push_back(std::bit_cast<float>(bits));
    values.push_back(-std::bit_cast<float>(bits));
  }
  values.resize(values.size() / kBlock * kBlock);
  for (std::size_t b = 0; b < values.size(); b += kBlock) values[b] = 448.0f;  // scale 1 in every block
  std::vector<std::uint8_t> codes(values.size());
  std::vector<float> scales(dist::detail::Float8BlockCount(values.size()));
  dist::detail::EncodeFloat8Blocks(values.data(), values.size(), codes.data(), scales.data());
  BOOST_TEST(std::all_of(scales.begin(), scales.end(), [](float s) { return s == 1.0f; }));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    mismatches += codes[i] != mlframework::detail::FloatToFloat8E4M3FNBits(values[i]) ? 1 : 0;
  }
  BOOST_TEST(mismatches == 0u);
  // And every code decodes to the library's widening of it.
  std::vector<std::uint8_t> all;
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7fu) != 0x7fu) all.push_back(static_cast<std::uint8_t>(c));  // the encoder writes no NaN code
  }
  const std::vector<float> one{1.0f};
  std::vector<float> decoded(all.size());
  dist::detail::DecodeSumFloat8Blocks(all.data(), one.data(), 1, all.size(), decoded.data());
  for (std::size_t i = 0; i < all.size(); ++i) {
    BOOST_TEST(std::bit_cast<std::uint32_t>(decoded[i]) ==
               std::bit_cast<std::uint32_t>(mlframework::detail::Float8E4M3FNBitsToFloat(all[i])));
  }
}

// The all-to-all sends chunk p to rank p, in every dtype (FP8 as its bytes), and refuses
// mismatched tensors before any communication.
BOOST_AUTO_TEST_CASE(AllToAllMovesChunks) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  constexpr std::size_t kChunk = 5;
  for (const DataType dtype : {DataType::Float32, DataType::BFloat16, DataType::Float8E4M3FN}) {
    BOOST_TEST_CONTEXT(mlframework::ToString(dtype)) {
      std::vector<float> send(kChunk * world);
      for (std::size_t p = 0; p < world; ++p) {
        for (std::size_t i = 0; i < kChunk; ++i) send[p * kChunk + i] = Sent(rank, p, i);
      }
      const TensorPtr in = mlframework::FromVector(send, {send.size()}, dtype);
      const TensorPtr out = mlframework::Zeros({send.size()}, dtype);
      group->AllToAll(*in, *out);
      const std::vector<float> got = out->ToFloatVector();
      for (std::size_t p = 0; p < world; ++p) {
        for (std::size_t i = 0; i < kChunk; ++i) {
          BOOST_TEST(got[p * kChunk + i] == Sent(static_cast<int>(p), static_cast<std::size_t>(rank), i));
        }
      }
    }
  }
  const TensorPtr in = mlframework::Zeros({4 * world});
  const TensorPtr shorter = mlframework::Zeros({4 * world - 1});
  const TensorPtr half = mlframework::Zeros({4 * world}, DataType::BFloat16);
  CheckArgumentError([&] { group->AllToAll(*in, *shorter); }, "output");
  CheckArgumentError([&] { group->AllToAll(*in, *half); }, "output");
  if (world > 1) CheckArgumentError([&] { group->AllToAll(*shorter, *shorter); }, "input");
}

// The FP8 reduce-scatter equals the FP32 sum within the analytic bound, every rank gets the
// bits of the rank-order sum of the decoded parts, and a second run gives the same bits.
BOOST_AUTO_TEST_CASE(ReduceScatterWithinBoundSameBits) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  const std::size_t count = 3 * kBlock + 40;
  const std::vector<float> mine = WireValues(count * world, rank);
  const auto everything = GatherAll(*group, mine);
  const TensorPtr input = mlframework::FromVector(mine, {mine.size()});
  const TensorPtr output = mlframework::Zeros({count});
  dist::Float8BlockReduceScatter(*group, *input, *output);
  const std::vector<float> got = output->ToFloatVector();
  const auto me = static_cast<std::size_t>(rank);
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0.0;
    for (const auto& values : everything) exact += values[me * count + i];
    BOOST_TEST(std::fabs(got[i] - exact) <= WireBound(everything, me, count, i), "element " << i);
  }
  if (world > 1) BOOST_TEST(Bits(got) == Bits(RankOrderSum(everything, me, count)));
  if (world == 1) BOOST_TEST(Bits(got) == Bits(mine));  // nothing travels, nothing is rounded
  const TensorPtr again = mlframework::Zeros({count});
  dist::Float8BlockReduceScatter(*group, *input, *again);
  BOOST_TEST(Bits(again->ToFloatVector()) == Bits(got));
  if (world > 1) {
    // In pieces of one block (the last one short): the blocks, and so the bits, are the same.
    const TensorPtr pieces = mlframework::Zeros({count});
    dist::detail::Float8BlockReduceScatterInPieces(*group, *input, *pieces, kBlock);
    BOOST_TEST(Bits(pieces->ToFloatVector()) == Bits(got));
    CheckArgumentError([&] { dist::detail::Float8BlockReduceScatterInPieces(*group, *input, *pieces, 0); }, "piece");
    CheckArgumentError([&] { dist::detail::Float8BlockReduceScatterInPieces(*group, *input, *pieces, kBlock + 1); },
                       "piece");
  }
  // Bad input, before any communication.
  const TensorPtr half = mlframework::Zeros({count * world}, DataType::BFloat16);
  CheckArgumentError([&] { dist::Float8BlockReduceScatter(*group, *half, *output); }, "input");
  const TensorPtr wrong = mlframework::Zeros({count + 1});
  CheckArgumentError([&] { dist::Float8BlockReduceScatter(*group, *input, *wrong); }, "input");
}

// A factor multiplies each sum once, in the decoding pass: the bits of the plain reduce-scatter
// scaled afterwards (so FSDP's averaged shards keep their bits), in pieces too; with one rank
// the output is the input times the factor. A factor that is not finite is an ArgumentError
// naming it, and the output is left as it was.
BOOST_AUTO_TEST_CASE(ReduceScatterFactorIsOneMultiplyOfTheSums) {
  auto group = mlfw_test::WorldGroup();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  const std::size_t count = 2 * kBlock + 9;
  const std::vector<float> mine = WireValues(count * world, group->Rank());
  const TensorPtr input = mlframework::FromVector(mine, {mine.size()});
  const TensorPtr plain = mlframework::Zeros({count});
  dist::Float8BlockReduceScatter(*group, *input, *plain);
  const float factor = 1.0f / 3.0f;
  std::vector<float> expected = plain->ToFloatVector();
  for (float& v : expected) v *= factor;
  const TensorPtr scaled = mlframework::Zeros({count});
  dist::Float8BlockReduceScatter(*group, *input, *scaled, factor);
  BOOST_TEST(Bits(scaled->ToFloatVector()) == Bits(expected));
  if (world > 1) {
    const TensorPtr pieces = mlframework::Zeros({count});
    dist::detail::Float8BlockReduceScatterInPieces(*group, *input, *pieces, kBlock, factor);
    BOOST_TEST(Bits(pieces->ToFloatVector()) == Bits(expected));
  }
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
    CheckArgumentError([&] { dist::Float8BlockReduceScatter(*group, *input, *scaled, bad); }, "factor");
    BOOST_TEST(Bits(scaled->ToFloatVector()) == Bits(expected));
  }
}

// The FP8 all-reduce: the same bits on every rank, within the bound of the exact sum.
BOOST_AUTO_TEST_CASE(AllReduceSameBitsOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  const std::size_t count = 2 * kBlock + 9;
  const std::vector<float> mine = WireValues(count, group->Rank());
  const auto everything = GatherAll(*group, mine);
  const TensorPtr tensor = mlframework::FromVector(mine, {count});
  dist::Float8BlockAllReduce(*group, *tensor);
  const std::vector<float> got = tensor->ToFloatVector();
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0.0;
    for (const auto& values : everything) exact += values[i];
    BOOST_TEST(std::fabs(got[i] - exact) <= WireBound(everything, 0, count, i), "element " << i);
  }
  const auto results = GatherAll(*group, got);
  for (const auto& other : results) BOOST_TEST(Bits(other) == Bits(got));
  if (group->WorldSize() > 1) {
    // In pieces of one block (the last one short): the same bits.
    const TensorPtr pieces = mlframework::FromVector(mine, {count});
    dist::detail::Float8BlockAllReduceInPieces(*group, *pieces, kBlock);
    BOOST_TEST(Bits(pieces->ToFloatVector()) == Bits(got));
  }
  const TensorPtr half = mlframework::Zeros({count}, DataType::Float16);
  CheckArgumentError([&] { dist::Float8BlockAllReduce(*group, *half); }, "tensor");
}

// FSDP with the FP8 wire (set on the FSDP, or on one unit only) lands every rank's gradient
// shard within the bound of the FP32 wire's, for every strategy; the BF16 reduce dtype within
// its own bound (each averaged value rounded to BF16's 8 significant bits, 2^-8 relative,
// summed in FP32 and the sum rounded to BF16 once more).
BOOST_AUTO_TEST_CASE(FsdpShardsWithinTheWireBounds) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const int world = group->WorldSize();
  const std::size_t count = 4 * kBlock * static_cast<std::size_t>(world) + 6;  // padded
  const GradientMap params{{"w", mlframework::Zeros({count})}};
  const std::vector<float> mine = WireValues(count, rank);
  const GradientMap grads{{"w", mlframework::FromVector(mine, {count})}};
  const auto everything = GatherAll(*group, mine);
  std::vector<fsdp::ShardingStrategy> strategies{fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp,
                                                 fsdp::ShardingStrategy::NoShard};
  for (const auto strategy : strategies) {
    for (const int variant : {0, 1, 2}) {  // FP8 on the FSDP, FP8 on the unit, BF16 reduce dtype
      BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " variant " << variant) {
        fsdp::FSDPConfig config{.Strategy = strategy};
        fsdp::UnitPrecision precision;
        if (variant == 0) config.Wire = fsdp::GradientWire::Float8Blocks;
        if (variant == 1) precision.Wire = fsdp::GradientWire::Float8Blocks;
        if (variant == 2) config.ReduceDType = DataType::BFloat16;
        fsdp::FSDP model(group, config);
        auto& unit = model.RegisterUnit("w", params, precision);
        BOOST_TEST((unit.Wire() == fsdp::GradientWire::Float8Blocks) == (variant != 2));
        unit.Gather();
        unit.ReduceGradientsAsync(grads);
        unit.WaitReduce();
        unit.Release();
        const std::vector<float> got = unit.LocalGradient()->ToFloatVector();
        const std::size_t offset = unit.ShardOffset();
        for (std::size_t i = 0; i < got.size() && offset + i < count; ++i) {
          double exact = 0.0;
          double magnitude = 0.0;
          for (const auto& values : everything) {
            exact += values[offset + i];
            magnitude += std::fabs(values[offset + i]);
          }
          // Averaged over the ranks, as the FP32 wire's result; the average's own rounding
          // (a power of two for 1, 2 and 4 ranks: exact) adds nothing.
          double bound = 0.0;
          if (variant == 2) {
            bound = (0x1p-7 + static_cast<double>(world) * 0x1p-24) * magnitude;
          } else if (world > 1) {
            // The bound per padded chunk: chunk and position of this element in WireBound's terms.
            const std::size_t chunk_count = strategy == fsdp::ShardingStrategy::NoShard ? count : unit.ShardSize();
            std::vector<std::vector<float>> padded = everything;
            for (auto& values : padded)
              values.resize(
                  chunk_count * (strategy == fsdp::ShardingStrategy::NoShard ? 1 : static_cast<std::size_t>(world)),
                  0.0f);
            const std::size_t chunk = strategy == fsdp::ShardingStrategy::NoShard ? 0 : static_cast<std::size_t>(rank);
            bound = WireBound(padded, chunk, chunk_count, i);
          }
          BOOST_TEST(std::fabs(static_cast<double>(got[i]) * world - exact) <= bound, "element " << offset + i);
        }
      }
    }
  }
}

// An infinity in one rank's gradient reaches the shard that holds it as NaN, and the overflow
// agreement sees it on every rank.
BOOST_AUTO_TEST_CASE(InfOnOneRankIsDetected) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const int world = group->WorldSize();
  const std::size_t count = 2 * kBlock * static_cast<std::size_t>(world);
  fsdp::FSDP model(group, {.Wire = fsdp::GradientWire::Float8Blocks});
  fsdp::FSDPMixedPrecisionManager manager({}, model);
  auto& unit = model.RegisterUnit("w", {{"w", mlframework::Zeros({count})}});
  for (const bool poison : {false, true}) {
    std::vector<float> mine = WireValues(count, rank);
    if (poison && rank == world - 1) mine[3] = kInf;  // in rank 0's shard
    unit.Gather();
    unit.ReduceGradients({{"w", mlframework::FromVector(mine, {count})}});
    unit.Release();
    const TensorPtr shard = unit.LocalGradient();
    BOOST_TEST(manager.CheckOverflow({{"w", shard}}) == poison);
    // Through the wire a NaN (the block's scale); on one rank nothing travels: the Inf itself.
    if (poison && rank == 0) BOOST_TEST(!std::isfinite(shard->ToFloatVector()[3]));
    unit.ZeroGrad();
  }
}

// HybridShard: the reduce-scatter over the shard group and the replicas' all-reduce both on the
// FP8 wire: the bits of the codec's rank-order sums composed (each shard group's sum, then the
// replicas' sum of those, averaged), within the bound of the two encodings.
BOOST_AUTO_TEST_CASE(HybridShardAcrossReplicas) {
  auto group = mlfw_test::WorldGroup();
  const int world = group->WorldSize();
  if (world < 4) return;  // needs replicas of a group of two
  BOOST_TEST_REQUIRE(world == 4);
  const std::size_t count = 4 * kBlock;
  fsdp::FSDP model(
      group,
      {.Strategy = fsdp::ShardingStrategy::HybridShard, .Wire = fsdp::GradientWire::Float8Blocks, .ShardGroupSize = 2});
  auto& unit = model.RegisterUnit("w", {{"w", mlframework::Zeros({count})}});
  const std::vector<float> mine = WireValues(count, group->Rank());
  const auto everything = GatherAll(*group, mine);
  unit.Gather();
  unit.ReduceGradients({{"w", mlframework::FromVector(mine, {count})}});
  unit.Release();
  const std::vector<float> got = unit.LocalGradient()->ToFloatVector();
  const std::size_t shard = unit.ShardSize();
  const auto shard_rank = static_cast<std::size_t>(group->Rank() % 2);
  // Shard groups {0, 1} and {2, 3}; this rank's replicas are shard_rank and shard_rank + 2.
  const std::vector<float> group0 = RankOrderSum({everything[0], everything[1]}, shard_rank, shard);
  const std::vector<float> group1 = RankOrderSum({everything[2], everything[3]}, shard_rank, shard);
  std::vector<float> expected = RankOrderSum({group0, group1}, 0, shard);
  for (float& value : expected) value *= 0.25f;  // the average over 4 ranks: exact
  BOOST_TEST(Bits(got) == Bits(expected));
  // The bound: the first encoding's (WireBound over all four ranks), the second's on sums of at
  // most 1.1 x their magnitudes, and the FP32 additions.
  std::vector<double> magnitude(shard, 0.0);
  for (std::size_t i = 0; i < shard; ++i) {
    for (const auto& values : everything) magnitude[i] += std::fabs(values[shard_rank * shard + i]);
  }
  for (std::size_t i = 0; i < shard; ++i) {
    double block_amax = 0.0;
    for (std::size_t j = (i / kBlock) * kBlock; j < std::min(shard, (i / kBlock + 1) * kBlock); ++j) {
      block_amax = std::max(block_amax, magnitude[j]);
    }
    double exact = 0.0;
    for (const auto& values : everything) exact += values[shard_rank * shard + i];
    const double bound = WireBound(everything, shard_rank, shard, i) + 1.1 * (magnitude[i] * 0x1p-4) +
                         2.0 * 1.1 * (block_amax * 0x1p-17) + 0x1p-22 * magnitude[i];
    BOOST_TEST(std::fabs(static_cast<double>(got[i]) * world - exact) <= bound, "element " << i);
  }
}

// Bad configuration: an unknown wire names the field and the value, before anything changes.
BOOST_AUTO_TEST_CASE(BadWireIsAnArgumentError) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDPConfig config;
  config.Wire = static_cast<fsdp::GradientWire>(7);
  CheckArgumentError([&] { fsdp::FSDP model(group, config); }, "Wire", "7");
  fsdp::FSDP model(group);
  fsdp::UnitPrecision precision;
  precision.Wire = static_cast<fsdp::GradientWire>(9);
  CheckArgumentError(
      [&] {
        model.RegisterUnit("w", {{"w", mlframework::Zeros({8})}}, precision);
      },
      "precision.Wire", "9");
  BOOST_TEST(model.UnitCount() == 0u);
  BOOST_TEST(fsdp::ToString(fsdp::GradientWire::Float8Blocks) == "Float8Blocks");
  BOOST_TEST(dist::Float8WireBytesPerElement(1u << 24) == 1.0 + 4.0 / 256.0);
}

BOOST_AUTO_TEST_SUITE_END()
