// Resharding checkpoints of optimizer state below FP32: 8-bit block-scaled moments saved at 4
// simulated ranks load at 2 and 3 bit for bit (the shards fall on whole blocks) and training
// continues bit-identically; shards that cut blocks, or another format, load only when a
// conversion is asked for, and then within the codes' bounds. BF16 master shards
// (FSDPConfig::MasterDType) with their remainders reshard likewise, and convert from and into
// FP32 masters only when asked.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "distributed/ReshardSupport.hpp"

namespace fsdp = mlframework::distributed::fsdp;
namespace optim = mlframework::optimizers;
using mlframework::StateFormat;
using mlfw_test::SimulatedRankGroup;

namespace {

constexpr std::size_t kLowBitBlock = 32;

// Units whose shards at 2, 3 and 4 ranks are whole blocks of 32: 768 = 24 * 32 elements (shards
// of 384, 256, 192) and 1536 (768, 512, 384).
mlframework::GradientMap LowBitUnit(std::size_t rows, float amplitude) {
  std::vector<float> w(rows * 32);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = amplitude * std::sin(0.3f * static_cast<float>(i) + 0.1f);
  return {{"weight", mlframework::FromVector(w, {rows, 32})}};
}

struct LowBitRank {
  std::unique_ptr<fsdp::FSDP> model;
  std::unique_ptr<optim::Adam> adam;
};

optim::AdamOptions LowBitAdam(StateFormat first, StateFormat second) {
  optim::AdamOptions o = optim::AdamOptions::AdamW(2e-3, 1e-2);
  o.FirstMomentFormat = first;
  o.SecondMomentFormat = second;
  o.StateBlockSize = kLowBitBlock;
  return o;
}

// The units' rows of 32 elements and FSDPConfig::ShardAlignment.
struct LowBitLayout {
  std::size_t rows_a = 24;
  std::size_t rows_b = 48;
  std::size_t alignment = 1;
};

std::vector<LowBitRank> MakeLowBitWorld(int world, float amplitude, const optim::AdamOptions& options,
                                        const LowBitLayout& layout = {}) {
  std::vector<LowBitRank> ranks(static_cast<std::size_t>(world));
  // BF16 masters live in BF16 shards.
  const fsdp::FSDPConfig config{.MasterDType = options.Masters == mlframework::MasterFormat::Float32
                                                   ? mlframework::DataType::Float32
                                                   : mlframework::DataType::BFloat16,
                                .ShardAlignment = layout.alignment};
  for (int r = 0; r < world; ++r) {
    LowBitRank& rank = ranks[static_cast<std::size_t>(r)];
    rank.model = std::make_unique<fsdp::FSDP>(std::make_shared<SimulatedRankGroup>(r, world), config);
    rank.model->RegisterUnit("a", LowBitUnit(layout.rows_a, amplitude));
    rank.model->RegisterUnit("b", LowBitUnit(layout.rows_b, amplitude));
    rank.adam = std::make_unique<optim::Adam>(rank.model->ShardedParameters(), options);
  }
  return ranks;
}

// One step on every simulated rank with its range of global gradients exact at any world size.
void StepLowBit(std::vector<LowBitRank>& ranks, int step) {
  for (LowBitRank& rank : ranks) {
    for (std::size_t u = 0; u < rank.model->UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
      std::vector<float> g(unit.ShardSize(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const std::size_t e = unit.ShardOffset() + i;
        if (e < unit.NumElements()) {
          g[i] = std::sin(0.37f * static_cast<float>(e) + 0.5f * static_cast<float>(u) + static_cast<float>(step)) *
                 std::ldexp(1.0f, static_cast<int>(e % 7) - 3);
        }
      }
      unit.SetLocalGradient(mlframework::FromVector(g, {g.size()}));
    }
    rank.model->Step(*rank.adam);
  }
}

// The unit's whole flat buffer over the world: the shards' bytes in FP32 (@p state -1), the
// optimizer's exact FP32 masters (-2: BF16 shards joined with their remainders) or the stored
// codes of state @p state, then (for block-scaled states) the scales of the global blocks.
std::vector<std::uint8_t> StitchBytes(const std::vector<LowBitRank>& ranks, std::size_t u, int state) {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;
  for (const LowBitRank& rank : ranks) {
    const fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
    const std::size_t keep =
        std::min(unit.ShardSize(), unit.NumElements() - std::min(unit.NumElements(), unit.ShardOffset()));
    if (state < 0) {
      const std::vector<float> values =
          state == -1 ? unit.LocalShard()->ToFloatVector() : rank.adam->StateMasterValues(unit.Name());
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(values.data());
      codes.insert(codes.end(), bytes, bytes + keep * sizeof(float));
      continue;
    }
    const mlframework::amp::StoredStateVector stored =
        rank.adam->StoredState(unit.Name(), static_cast<std::size_t>(state));
    const std::size_t element = stored.Codes.size() / unit.ShardSize();
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(stored.Codes.data());
    codes.insert(codes.end(), bytes, bytes + keep * element);
    const std::size_t blocks = (keep + stored.BlockSize - 1) / stored.BlockSize;
    const auto* s = reinterpret_cast<const std::uint8_t*>(stored.Scales.data());
    if (!stored.Scales.empty()) scales.insert(scales.end(), s, s + blocks * sizeof(float));
  }
  codes.insert(codes.end(), scales.begin(), scales.end());
  return codes;
}

void CheckSameLowBitState(const std::vector<LowBitRank>& a, const std::vector<LowBitRank>& b, const std::string& what) {
  for (std::size_t u = 0; u < 2; ++u) {
    for (int state = -2; state < 2; ++state) {
      BOOST_TEST_CONTEXT(what << ": unit " << u << " state " << state) {
        const std::vector<std::uint8_t> x = StitchBytes(a, u, state);
        const std::vector<std::uint8_t> y = StitchBytes(b, u, state);
        BOOST_REQUIRE_EQUAL(x.size(), y.size());
        BOOST_CHECK(x == y);
      }
    }
  }
}

std::vector<std::vector<std::byte>> SaveLowBit(const std::vector<LowBitRank>& ranks, std::int64_t step) {
  std::vector<std::vector<std::byte>> blobs;
  for (const LowBitRank& rank : ranks) {
    blobs.push_back(rank.model->SaveShardedCheckpoint({.Optimizer = rank.adam.get(), .Step = step}));
  }
  return blobs;
}

void LoadLowBit(std::vector<LowBitRank>& ranks, const std::vector<std::vector<std::byte>>& blobs,
                mlframework::amp::StateConversion conversion = mlframework::amp::StateConversion::None) {
  for (LowBitRank& rank : ranks) {
    rank.model->LoadShardedCheckpoint(blobs, {.Optimizer = rank.adam.get(), .Conversion = conversion});
  }
}

// The decoded moments of unit @p u over the world.
std::vector<float> StitchMoments(const std::vector<LowBitRank>& ranks, std::size_t u, std::size_t state) {
  std::vector<float> full;
  for (const LowBitRank& rank : ranks) {
    const fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
    const std::span<const float> values = rank.adam->StateVector(unit.Name(), state);
    for (std::size_t i = 0; i < values.size() && unit.ShardOffset() + i < unit.NumElements(); ++i) {
      full.push_back(values[i]);
    }
  }
  return full;
}

// Saves after two steps at 4 simulated ranks, loads at 2, 3 and 4 (the state bit for bit) and
// steps twice more: bit for bit with an uninterrupted run at 4 ranks at every world size when
// @p any_world, else at 4 ranks only.
void CheckResumesAtTwoThreeAndFour(const optim::AdamOptions& options, const std::string& label, bool any_world,
                                   const LowBitLayout& layout = {}) {
  std::vector<LowBitRank> saved = MakeLowBitWorld(4, 1.0f, options, layout);
  StepLowBit(saved, 0);
  StepLowBit(saved, 1);
  const auto blobs = SaveLowBit(saved, 2);
  std::vector<LowBitRank> reference = MakeLowBitWorld(4, 1.0f, options, layout);
  for (int step = 0; step < 4; ++step) StepLowBit(reference, step);
  for (const int world : {2, 3, 4}) {
    BOOST_TEST_CONTEXT(label << " at " << world << " ranks") {
      std::vector<LowBitRank> loaded = MakeLowBitWorld(world, 2.0f, options, layout);
      LoadLowBit(loaded, blobs);
      CheckSameLowBitState(saved, loaded, "after the load");
      StepLowBit(loaded, 2);
      StepLowBit(loaded, 3);
      if (any_world || world == 4) CheckSameLowBitState(reference, loaded, "two steps after the load");
    }
  }
}

// The shards' values (@p state -1) or the exact FP32 masters (-2) of unit @p u over the world, as floats.
std::vector<float> StitchFloats(const std::vector<LowBitRank>& ranks, std::size_t u, int state) {
  const std::vector<std::uint8_t> bytes = StitchBytes(ranks, u, state);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

optim::AdamOptions WithMasters(optim::AdamOptions options, mlframework::MasterFormat masters) {
  options.Masters = masters;
  options.RoundingSeed = 77;
  return options;
}

// @p values rounded to nearest even into BF16, as floats.
std::vector<float> RoundedToBFloat16(const std::vector<float>& values) {
  return mlframework::FromVector(values, {values.size()}, mlframework::DataType::BFloat16)->ToFloatVector();
}

// The payload fields of a blob, little-endian, and its StateBlob.hpp frame: "MLFW", u16 frame
// version 1, u16 payload version, the kind, u64 payload length, the payload, FNV-1a of all before.
struct Payload {
  std::vector<std::byte> bytes;
  template <class T>
  void Put(T value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof value);
  }
  void Raw(std::span<const std::byte> raw) { bytes.insert(bytes.end(), raw.begin(), raw.end()); }
  void Text(const std::string& text) {
    Put(static_cast<std::uint32_t>(text.size()));
    Raw(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  std::vector<std::byte> Framed(const std::string& kind, std::uint16_t version) const {
    Payload frame;
    frame.Raw(std::as_bytes(std::span<const char>("MLFW", 4)));
    frame.Put(std::uint16_t{1});
    frame.Put(version);
    frame.Put(static_cast<std::uint16_t>(kind.size()));
    frame.Raw(std::as_bytes(std::span<const char>(kind.data(), kind.size())));
    frame.Put(static_cast<std::uint64_t>(bytes.size()));
    frame.Raw(bytes);
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    for (const std::byte b : frame.bytes) {
      hash ^= static_cast<std::uint8_t>(b);
      hash *= 0x100000001b3ULL;
    }
    frame.Put(hash);
    return frame.bytes;
  }
};

// The blob of rank @p rank of a version 4 checkpoint (Float16 moments as plain FP16 values, no
// scales) of the LowBitUnit models (units "a" and "b") at @p world ranks, written by hand from
// @p source, the same model saved at @p world ranks with FP32 moments: its masters, its options,
// its moments rounded to FP16 (@p halves: per unit and moment, the whole unit's values).
std::vector<std::byte> Version4Float16Blob(const std::vector<LowBitRank>& source, std::size_t rank, std::int64_t step,
                                           const std::vector<std::vector<std::vector<float>>>& halves) {
  const LowBitRank& r = source[rank];
  Payload p;
  p.Put(static_cast<std::uint32_t>(source.size()));
  p.Put(static_cast<std::uint32_t>(rank));
  p.Put(static_cast<std::uint8_t>(fsdp::ShardingStrategy::FullShard));
  p.Put(step);
  p.Put(std::uint8_t{2});  // Adam
  const auto options = r.adam->StateOptions();
  p.Put(static_cast<std::uint32_t>(options.size()));
  for (const auto& option : options) p.Put(option.second);
  p.Put(r.adam->StateLearningRate());
  p.Put(static_cast<std::int64_t>(r.adam->StepCount()));
  p.Put(std::uint32_t{2});  // moments
  p.Put(std::uint8_t{0});   // no scaler
  p.Put(std::uint64_t{0});
  p.Put(static_cast<std::uint64_t>(r.model->UnitCount()));
  for (std::size_t u = 0; u < r.model->UnitCount(); ++u) {
    const fsdp::FSDPShardingUnit& unit = r.model->Unit(u);
    p.Text(unit.Name());
    p.Put(static_cast<std::uint8_t>(mlframework::DataType::Float32));
    p.Put(static_cast<std::uint64_t>(unit.NumElements()));
    p.Put(static_cast<std::uint64_t>(unit.ShardSize() * source.size()));  // padded
    p.Put(static_cast<std::uint64_t>(unit.ShardOffset()));
    p.Put(static_cast<std::uint64_t>(unit.ShardSize()));
    p.Put(std::uint32_t{1});
    p.Text("weight");
    p.Put(std::uint32_t{2});
    p.Put(static_cast<std::uint64_t>(unit.NumElements() / 32));
    p.Put(std::uint64_t{32});
    p.Put(std::uint64_t{0});
    p.Put(static_cast<std::uint8_t>(mlframework::MasterFormat::Float32));
    const std::vector<float> master = r.adam->StateMasterValues(unit.Name());
    p.Raw(std::as_bytes(std::span<const float>(master)));
    for (std::size_t v = 0; v < 2; ++v) {
      p.Put(std::uint8_t{1});
      p.Put(static_cast<std::uint8_t>(StateFormat::Float16));
      p.Put(std::uint64_t{256});
      std::vector<float> shard(unit.ShardSize(), 0.0f);  // the padding is zero
      for (std::size_t i = 0; i < shard.size() && unit.ShardOffset() + i < unit.NumElements(); ++i) {
        shard[i] = halves[u][v][unit.ShardOffset() + i];
      }
      p.Raw(mlframework::FromVector(shard, {shard.size()})->CastTo(mlframework::DataType::Float16)->HostBytes());
    }
  }
  return p.Framed("distributed.fsdp.ShardedCheckpoint", 4);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpShardedCheckpointLowBit)

BOOST_AUTO_TEST_CASE(version_four_float16_moments_load_as_scaled_blocks_at_any_world_size) {
  // A checkpoint of version 4 holds Float16 moments as plain FP16 values. Each loads into the
  // block-scaled format without a conversion asked for, exactly (an FP16 value is a code of any
  // block whose largest value is an FP16 value), at 3 ranks as at 2, and training continues as
  // from the same state saved in the current version.
  std::vector<LowBitRank> fp32 = MakeLowBitWorld(2, 1.0f, LowBitAdam(StateFormat::Float32, StateFormat::Float32));
  StepLowBit(fp32, 0);
  StepLowBit(fp32, 1);
  std::vector<std::vector<std::vector<float>>> halves(2);
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t v = 0; v < 2; ++v) {
      const std::vector<float> values = StitchMoments(fp32, u, v);
      halves[u].push_back(
          mlframework::FromVector(values, {values.size()})->CastTo(mlframework::DataType::Float16)->ToFloatVector());
    }
  }
  std::vector<std::vector<std::byte>> blobs;
  for (std::size_t r = 0; r < 2; ++r) blobs.push_back(Version4Float16Blob(fp32, r, 2, halves));
  const optim::AdamOptions half = LowBitAdam(StateFormat::Float16, StateFormat::Float16);
  std::vector<LowBitRank> at_two;
  for (const int world : {3, 2}) {
    BOOST_TEST_CONTEXT("at " << world << " ranks") {
      std::vector<LowBitRank> loaded = MakeLowBitWorld(world, 2.0f, half);
      LoadLowBit(loaded, blobs);
      BOOST_TEST(loaded.front().adam->StepCount() == 2);
      for (std::size_t u = 0; u < 2; ++u) {
        BOOST_TEST(StitchFloats(loaded, u, -1) == StitchFloats(fp32, u, -1), boost::test_tools::per_element());
        for (std::size_t v = 0; v < 2; ++v) {
          BOOST_TEST(StitchMoments(loaded, u, v) == halves[u][v], boost::test_tools::per_element());
          const mlframework::amp::StoredStateVector stored = loaded.front().adam->StoredState("a", v);
          BOOST_TEST(stored.Scales.size() ==
                     mlframework::StateBlockCount(loaded.front().model->Unit(0).ShardSize(), kLowBitBlock));
        }
      }
      if (world == 2) at_two = std::move(loaded);
    }
  }
  // Saved again (the current version) and loaded: the same state, and the same two steps after it.
  std::vector<LowBitRank> again = MakeLowBitWorld(2, 3.0f, half);
  LoadLowBit(again, SaveLowBit(at_two, 2));
  CheckSameLowBitState(at_two, again, "after the load of the current version");
  for (const int step : {2, 3}) {
    StepLowBit(at_two, step);
    StepLowBit(again, step);
  }
  CheckSameLowBitState(at_two, again, "two steps after the load");
  // Into another format, as any other: only when asked.
  std::vector<LowBitRank> eight = MakeLowBitWorld(2, 2.0f, LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block));
  BOOST_CHECK_THROW(LoadLowBit(eight, blobs), mlframework::ArgumentError);
  BOOST_CHECK_EQUAL(eight.front().adam->StepCount(), 0);
}

BOOST_AUTO_TEST_CASE(eight_bit_moments_saved_at_four_ranks_continue_bit_for_bit_at_two_and_three) {
  for (const auto& [first, second] : {std::pair{StateFormat::Int8Block, StateFormat::UInt8Block},
                                      std::pair{StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block},
                                      std::pair{StateFormat::BFloat16, StateFormat::Float16},
                                      std::pair{StateFormat::Float16, StateFormat::Float16}}) {
    CheckResumesAtTwoThreeAndFour(LowBitAdam(first, second), mlframework::ToString(first), true);
  }
}

BOOST_AUTO_TEST_CASE(shards_that_cut_blocks_or_another_format_load_only_when_converted) {
  const optim::AdamOptions eight = LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block);
  std::vector<LowBitRank> saved = MakeLowBitWorld(4, 1.0f, eight);
  StepLowBit(saved, 0);
  const auto blobs = SaveLowBit(saved, 1);
  // 5 ranks: shards of 154 and 308 elements, which cut the blocks of 32.
  std::vector<LowBitRank> five = MakeLowBitWorld(5, 2.0f, eight);
  try {
    LoadLowBit(five, blobs);
    BOOST_FAIL("a load that cuts blocks without a conversion must fail");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "contents.Conversion");
    BOOST_CHECK(std::string(error.what()).find("whole blocks") != std::string::npos);
  }
  BOOST_CHECK_EQUAL(five.front().adam->StepCount(), 0);  // nothing loaded
  LoadLowBit(five, blobs, mlframework::amp::StateConversion::Convert);
  BOOST_CHECK_EQUAL(five.front().adam->StepCount(), 1);
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t v = 0; v < 2; ++v) {
      const std::vector<float> want = StitchMoments(saved, u, v);
      const std::vector<float> got = StitchMoments(five, u, v);
      BOOST_REQUIRE_EQUAL(want.size(), got.size());
      float absmax = 0.0f;
      for (const float x : want) absmax = std::max(absmax, std::fabs(x));
      for (std::size_t i = 0; i < want.size(); ++i) {
        // Re-encoded at other blocks: within a code step of the largest value (scale <= absmax / 127).
        BOOST_TEST(std::fabs(got[i] - want[i]) <= absmax / 127.0f, "unit " << u << " state " << v << " element " << i);
      }
    }
  }
  // Blocks of another size at shards that fall on both grids: the error says so.
  optim::AdamOptions sixty_four = eight;
  sixty_four.StateBlockSize = 2 * kLowBitBlock;
  std::vector<LowBitRank> wider = MakeLowBitWorld(2, 2.0f, sixty_four);
  try {
    LoadLowBit(wider, blobs);
    BOOST_FAIL("a load into blocks of another size without a conversion must fail");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "contents.Conversion");
    BOOST_CHECK_MESSAGE(std::string(error.what()).find("in blocks of another size") != std::string::npos, error.what());
  }
  BOOST_CHECK_EQUAL(wider.front().adam->StepCount(), 0);
  // 8-bit into FP32 moments: decoded exactly, with the conversion only.
  std::vector<LowBitRank> fp32 = MakeLowBitWorld(2, 2.0f, LowBitAdam(StateFormat::Float32, StateFormat::Float32));
  BOOST_CHECK_THROW(LoadLowBit(fp32, blobs), mlframework::ArgumentError);
  LoadLowBit(fp32, blobs, mlframework::amp::StateConversion::Convert);
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t v = 0; v < 2; ++v) {
      BOOST_CHECK(StitchMoments(fp32, u, v) == StitchMoments(saved, u, v));
    }
  }
  // FP32 moments into 8-bit at the same sharding: encoded as the step encodes them.
  std::vector<LowBitRank> back = MakeLowBitWorld(2, 3.0f, eight);
  BOOST_CHECK_THROW(LoadLowBit(back, SaveLowBit(fp32, 1)), mlframework::ArgumentError);
  LoadLowBit(back, SaveLowBit(fp32, 1), mlframework::amp::StateConversion::Convert);
  BOOST_CHECK(StitchBytes(back, 0, -1) == StitchBytes(saved, 0, -1));  // the masters, bit for bit
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t v = 0; v < 2; ++v) {
      const std::vector<float> want = StitchMoments(saved, u, v);
      const std::vector<float> got = StitchMoments(back, u, v);
      float absmax = 0.0f;
      for (const float x : want) absmax = std::max(absmax, std::fabs(x));
      for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::fabs(got[i] - want[i]) <= absmax / 127.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_masters_saved_at_four_ranks_load_bit_for_bit_at_two_and_three) {
  using mlframework::MasterFormat;
  for (const MasterFormat masters : {MasterFormat::BFloat16StochasticRounding, MasterFormat::BFloat16Remainder}) {
    // The remainders make the masters exact FP32, and stochastic rounding draws its bits by the
    // element's index in the unit (FSDP::Step() hands the optimizer the shard offsets): the
    // trajectory is the same at any world size.
    const optim::AdamOptions options =
        WithMasters(LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block), masters);
    BOOST_TEST((MakeLowBitWorld(1, 1.0f, options).front().model->Unit(0).LocalShard()->GetDataType() ==
                mlframework::DataType::BFloat16));
    CheckResumesAtTwoThreeAndFour(options, mlframework::ToString(masters), true);
  }
  // Units of 992 and 1440 elements with BF16 moments (per element: Float16 is block-scaled): at 3 ranks the shards hold
  // 331 and 480 elements, so shard offsets such as 331 and 662 are not multiples of eight (a Philox block).
  CheckResumesAtTwoThreeAndFour(
      WithMasters(LowBitAdam(StateFormat::BFloat16, StateFormat::BFloat16), MasterFormat::BFloat16StochasticRounding),
      "BFloat16StochasticRounding, shard offsets off the Philox blocks", true,
      LowBitLayout{.rows_a = 31, .rows_b = 45, .alignment = 1});
}

// The stochastic rounding's bits are keyed by the seed as much as by the step and the element:
// the checkpoint carries the saved optimizer's RoundingSeed and the load restores it (as the
// learning rate), so a run resumed by an optimizer built with another seed still continues bit
// for bit. A refused load leaves the loading optimizer's seed as it was.
BOOST_AUTO_TEST_CASE(the_rounding_seed_travels_with_the_checkpoint) {
  using mlframework::MasterFormat;
  const optim::AdamOptions saved_options = WithMasters(LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block),
                                                       MasterFormat::BFloat16StochasticRounding);
  optim::AdamOptions loading_options = saved_options;
  loading_options.RoundingSeed = 0x5eed0fda7aULL;
  std::vector<LowBitRank> saved = MakeLowBitWorld(4, 1.0f, saved_options);
  StepLowBit(saved, 0);
  StepLowBit(saved, 1);
  const auto blobs = SaveLowBit(saved, 2);
  std::vector<LowBitRank> reference = MakeLowBitWorld(4, 1.0f, saved_options);
  for (int step = 0; step < 4; ++step) StepLowBit(reference, step);
  for (const int world : {1, 2, 3}) {
    BOOST_TEST_CONTEXT("at " << world << " ranks") {
      // Refused (another master format, no conversion asked): the seed stays the optimizer's own.
      optim::AdamOptions remainder = loading_options;
      remainder.Masters = MasterFormat::BFloat16Remainder;
      std::vector<LowBitRank> refused = MakeLowBitWorld(world, 2.0f, remainder);
      BOOST_CHECK_THROW(LoadLowBit(refused, blobs), mlframework::ArgumentError);
      BOOST_TEST(refused.front().adam->Options().RoundingSeed == loading_options.RoundingSeed);

      std::vector<LowBitRank> loaded = MakeLowBitWorld(world, 2.0f, loading_options);
      LoadLowBit(loaded, blobs);
      for (const LowBitRank& rank : loaded) BOOST_TEST(rank.adam->Options().RoundingSeed == saved_options.RoundingSeed);
      StepLowBit(loaded, 2);
      StepLowBit(loaded, 3);
      CheckSameLowBitState(reference, loaded, "two steps after the load");
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_masters_convert_from_and_into_other_formats_only_when_asked) {
  using mlframework::MasterFormat;
  const optim::AdamOptions eight = LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block);
  const auto saved_with = [&](MasterFormat masters) {
    std::vector<LowBitRank> ranks = MakeLowBitWorld(4, 1.0f, WithMasters(eight, masters));
    StepLowBit(ranks, 0);
    return ranks;
  };
  const std::vector<LowBitRank> fp32 = saved_with(MasterFormat::Float32);
  const std::vector<LowBitRank> remainder = saved_with(MasterFormat::BFloat16Remainder);
  const std::vector<LowBitRank> rounded = saved_with(MasterFormat::BFloat16StochasticRounding);
  struct Case {
    const std::vector<LowBitRank>* saved;
    MasterFormat into;
    bool exact;  // the loaded masters equal the saved FP32 masters (else rounded to nearest even)
  };
  for (const Case& c :
       {Case{&fp32, MasterFormat::BFloat16StochasticRounding, false},
        Case{&fp32, MasterFormat::BFloat16Remainder, true},
        Case{&remainder, MasterFormat::BFloat16StochasticRounding, false},
        Case{&remainder, MasterFormat::Float32, true}, Case{&rounded, MasterFormat::BFloat16Remainder, true},
        Case{&rounded, MasterFormat::Float32, true}}) {
    const auto blobs = SaveLowBit(*c.saved, 1);
    const std::string from = mlframework::ToString(c.saved->front().adam->Options().Masters);
    BOOST_TEST_CONTEXT(from << " into " << mlframework::ToString(c.into)) {
      std::vector<LowBitRank> loaded = MakeLowBitWorld(2, 2.0f, WithMasters(eight, c.into));
      const std::vector<float> before = StitchFloats(loaded, 0, -2);
      try {
        LoadLowBit(loaded, blobs);
        BOOST_FAIL("masters of another format must load only when converted");
      } catch (const mlframework::ArgumentError& error) {
        BOOST_CHECK_EQUAL(error.Parameter(), "contents.Conversion");
        BOOST_CHECK(std::string(error.what()).find("masters of unit 'a' are stored as " + from) != std::string::npos);
      }
      BOOST_CHECK_EQUAL(loaded.front().adam->StepCount(), 0);
      BOOST_CHECK(StitchFloats(loaded, 0, -2) == before);  // nothing loaded
      LoadLowBit(loaded, blobs, mlframework::amp::StateConversion::Convert);
      BOOST_CHECK_EQUAL(loaded.front().adam->StepCount(), 1);
      for (std::size_t u = 0; u < 2; ++u) {
        const std::vector<float> want = StitchFloats(*c.saved, u, -2);
        BOOST_CHECK(StitchFloats(loaded, u, -2) == (c.exact ? want : RoundedToBFloat16(want)));
        // The shard holds the masters (FP32) or their rounding (stochastic rounding's BF16 masters);
        // under BFloat16Remainder it is the rounded half of the split, checked through the masters.
        if (c.into == MasterFormat::Float32) BOOST_CHECK(StitchFloats(loaded, u, -1) == want);
        if (c.into == MasterFormat::BFloat16StochasticRounding) {
          BOOST_CHECK(StitchFloats(loaded, u, -1) == StitchFloats(loaded, u, -2));
        }
      }
    }
  }
  // An FP32 master that BF16 cannot hold is refused by name, converted or not.
  std::vector<float> huge(std::size_t{24} * 32, 0.5f);
  huge[5] = 3.4e38f;
  fsdp::FSDP big(std::make_shared<SimulatedRankGroup>(0, 1));
  big.RegisterUnit("a", {{"weight", mlframework::FromVector(huge, {24, 32})}});
  big.RegisterUnit("b", LowBitUnit(48, 1.0f));
  const std::vector<std::vector<std::byte>> blob{big.SaveShardedCheckpoint()};
  fsdp::FSDP small(std::make_shared<SimulatedRankGroup>(0, 1), {.MasterDType = mlframework::DataType::BFloat16});
  small.RegisterUnit("a", LowBitUnit(24, 1.0f));
  small.RegisterUnit("b", LowBitUnit(48, 1.0f));
  try {
    small.LoadShardedCheckpoint(blob, {.Conversion = mlframework::amp::StateConversion::Convert});
    BOOST_FAIL("an FP32 master beyond BF16's range must be refused");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "saved_ranks");
    BOOST_CHECK(std::string(error.what()).find("master weight 5 of unit 'a'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(shards_aligned_to_the_state_blocks_reshard_bit_for_bit_where_they_would_cut_blocks) {
  const optim::AdamOptions eight = LowBitAdam(StateFormat::Int8Block, StateFormat::UInt8Block);
  // Units of 992 and 1440 elements: unaligned, their shards at 4 ranks (248 and 360 elements) and
  // at 3 (331 and 480) cut the blocks of 32, so a load at 3 needs a conversion.
  const LowBitLayout cut{.rows_a = 31, .rows_b = 45, .alignment = 1};
  std::vector<LowBitRank> unaligned = MakeLowBitWorld(4, 1.0f, eight, cut);
  StepLowBit(unaligned, 0);
  std::vector<LowBitRank> three = MakeLowBitWorld(3, 2.0f, eight, cut);
  try {
    LoadLowBit(three, SaveLowBit(unaligned, 1));
    BOOST_FAIL("unaligned shards that cut blocks must load only when converted");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "contents.Conversion");
  }
  // ShardAlignment = the block size: every shard is whole blocks at 2, 3 and 4 ranks (padded to
  // 1024 / 1056 / 1024 and 1536 / 1440 / 1536 elements), and the 8-bit moments, with FP32 or BF16
  // masters, reshard bit for bit and training continues bit for bit.
  const LowBitLayout aligned{.rows_a = 31, .rows_b = 45, .alignment = kLowBitBlock};
  for (const int world : {2, 3, 4}) {
    for (const LowBitRank& rank : MakeLowBitWorld(world, 1.0f, eight, aligned)) {
      for (std::size_t u = 0; u < 2; ++u) {
        BOOST_TEST(rank.model->Unit(u).ShardSize() % kLowBitBlock == 0U, "unit " << u << " at " << world);
        BOOST_TEST(rank.model->Unit(u).ShardOffset() % kLowBitBlock == 0U);
      }
    }
  }
  CheckResumesAtTwoThreeAndFour(eight, "aligned, FP32 masters", true, aligned);
  CheckResumesAtTwoThreeAndFour(WithMasters(eight, mlframework::MasterFormat::BFloat16Remainder),
                                "aligned, BF16 masters with remainders", true, aligned);
  // A zero alignment is refused by name.
  try {
    fsdp::FSDP model(std::make_shared<SimulatedRankGroup>(0, 1), {.ShardAlignment = 0});
    BOOST_FAIL("ShardAlignment 0 must be refused");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "ShardAlignment");
  }
}

BOOST_AUTO_TEST_SUITE_END()
