// OverflowReport, ScanNonFinite (CPU, fake device, user tensors), OverflowLogger, TrainingCsvWriter.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/OverflowLogger.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TrainingCsvWriter.hpp>

#include "NonFinite.hpp"
#include "amp/FakeDeviceBackend.hpp"
#include "core/UserTensor.hpp"

using mlframework::DataType;
using mlframework::FromVector;
using mlframework::GradientMap;
using mlframework::NonFiniteScan;
using mlframework::OverflowReport;
using mlframework::TensorPtr;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

// 5000 elements (more than one block of the host scan): NaN at 4100, +Inf at 4200 and 4300,
// -Inf at 4999; everything else finite.
std::vector<float> LongValues() {
  std::vector<float> values(5000, 0.5f);
  values[4100] = kNaN;
  values[4200] = kInf;
  values[4300] = kInf;
  values[4999] = -kInf;
  return values;
}

void CheckLong(const NonFiniteScan& scan) {
  BOOST_TEST(scan.Count == 4u);
  BOOST_TEST(scan.FirstIndex == 4100u);
  BOOST_TEST(scan.HasNaN);
  BOOST_TEST(scan.HasPosInf);
  BOOST_TEST(scan.HasNegInf);
  BOOST_TEST(scan.NaNCount == 1u);
  BOOST_TEST(scan.PosInfCount == 2u);
  BOOST_TEST(scan.NegInfCount == 1u);
}

const DataType kTypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};

}  // namespace

BOOST_AUTO_TEST_SUITE(NonFiniteScanTests)

BOOST_AUTO_TEST_CASE(CpuTensorsOfEveryDtype) {
  for (const DataType dtype : kTypes) {
    BOOST_TEST_CONTEXT(mlframework::ToString(dtype)) {
      const std::vector<TensorPtr> list{FromVector(LongValues(), {5000}, dtype),
                                        FromVector({1.0f, -2.0f, 3.0f}, {3}, dtype),
                                        FromVector({-kInf, 1.0f}, {2}, dtype)};
      const std::vector<NonFiniteScan> scans = mlframework::ScanNonFinite(list);
      BOOST_TEST_REQUIRE(scans.size() == 3u);
      CheckLong(scans[0]);
      BOOST_TEST(scans[1].Count == 0u);
      BOOST_TEST(!scans[1].HasNaN);
      BOOST_TEST(scans[2].Count == 1u);
      BOOST_TEST(scans[2].FirstIndex == 0u);
      BOOST_TEST(scans[2].HasNegInf);
      BOOST_TEST(!scans[2].HasPosInf);
    }
  }
}

BOOST_AUTO_TEST_CASE(FP16OverflowOfAFiniteFloatIsInf) {
  // 70000 does not fit FP16: stored as +Inf, which the scan of the FP16 tensor reports.
  const std::vector<TensorPtr> list{FromVector({1.0f, 70000.0f, -70000.0f}, {3}, DataType::Float16)};
  const NonFiniteScan scan = mlframework::ScanNonFinite(list)[0];
  BOOST_TEST(scan.Count == 2u);
  BOOST_TEST(scan.FirstIndex == 1u);
  BOOST_TEST(scan.HasPosInf);
  BOOST_TEST(scan.HasNegInf);
  BOOST_TEST(!scan.HasNaN);
}

BOOST_AUTO_TEST_CASE(FakeDeviceTensorsGoThroughTheirBackend) {
  for (const DataType dtype : kTypes) {
    const std::vector<TensorPtr> list{mlfw_test::FakeTensor(LongValues(), {5000}, dtype),
                                      mlfw_test::FakeTensor({2.0f, kNaN}, {2}, dtype)};
    const std::int64_t scans_before = mlfw_test::FakeBackend().ScanCount();
    const std::vector<NonFiniteScan> scans = mlframework::ScanNonFinite(list);
    BOOST_TEST(mlfw_test::FakeBackend().ScanCount() == scans_before + 1);  // one call for the run
    CheckLong(scans[0]);
    BOOST_TEST(scans[1].Count == 1u);
    BOOST_TEST(scans[1].FirstIndex == 1u);
    BOOST_TEST(scans[1].HasNaN);
  }
}

BOOST_AUTO_TEST_CASE(UserTensorsWithAndWithoutHostBytes) {
  using mlframework::testing::Mode;
  using mlframework::testing::UserTensor;
  for (const DataType dtype : kTypes) {
    for (const bool host : {true, false}) {
      for (const std::size_t misalign : {std::size_t{0}, std::size_t{1}}) {
        BOOST_TEST_CONTEXT(mlframework::ToString(dtype) << " host " << host << " misalign " << misalign) {
          auto tensor = std::make_shared<UserTensor>(LongValues(), dtype, Mode::Defaults, host, misalign);
          const std::vector<TensorPtr> list{tensor, FromVector({kInf}, {1}, dtype)};
          const std::vector<NonFiniteScan> scans = mlframework::ScanNonFinite(list);
          CheckLong(scans[0]);
          BOOST_TEST(scans[1].Count == 1u);
          BOOST_TEST(scans[1].HasPosInf);
          // Only tensors whose bytes cannot be read in place are widened through the virtuals.
          BOOST_TEST((tensor->calls.to_float_vector > 0) == (!host || misalign != 0));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ReportFromGradients) {
  const GradientMap gradients{{"clean", FromVector({1.0f, 2.0f}, {2})},
                              {"layer3.weight", FromVector({0.0f, kInf, kInf, 1.0f}, {4}, DataType::Float16)},
                              {"z.bias", FromVector({kNaN, -kInf}, {2}, DataType::BFloat16)}};
  const OverflowReport report = OverflowReport::FromGradients(gradients, 7, 65536.0f, 3);
  BOOST_TEST(report.Step == 7);
  BOOST_TEST(report.LossScale == 65536.0f);
  BOOST_TEST(report.Ranks == std::vector<int>{3});
  BOOST_TEST_REQUIRE(report.Tensors.size() == 2u);
  BOOST_TEST(report.Tensors[0].Name == "layer3.weight");
  BOOST_TEST(report.Tensors[0].NonFiniteCount == 2u);
  BOOST_TEST(report.Tensors[0].FirstIndex == 1u);
  BOOST_TEST(report.Tensors[1].Name == "z.bias");
  BOOST_TEST(report.Tensors[1].HasNaN);
  BOOST_TEST(report.Tensors[1].HasNegInf);
  BOOST_TEST(report.ToString() ==
             "step 7, scale 65536, rank 3: layer3.weight (2 Inf, first at 1), z.bias (1 NaN, 1 -Inf, first at 0)");
  // An unnamed list: "#<index>".
  const std::vector<TensorPtr> list{FromVector({1.0f}, {1}), FromVector({kNaN, kNaN}, {2}, DataType::Float16)};
  const OverflowReport unnamed = OverflowReport::FromTensors(list, 1, 2.0f);
  BOOST_TEST_REQUIRE(unnamed.Tensors.size() == 1u);
  BOOST_TEST(unnamed.Tensors[0].Name == "#1");
  BOOST_TEST(unnamed.Tensors[0].NonFiniteCount == 2u);
  BOOST_TEST(unnamed.Ranks == std::vector<int>{0});
  // Finite gradients: no tensor and no rank.
  const OverflowReport clean = OverflowReport::FromGradients({{"a", FromVector({1.0f}, {1})}}, 0, 1.0f);
  BOOST_TEST(clean.Tensors.empty());
  BOOST_TEST(clean.Ranks.empty());
  // Such a report (an overflow the scan no longer sees, as when a finite FP32 value only
  // overflows once unscaled) names no rank, rather than an empty list of them.
  BOOST_TEST(clean.ToString() == "step 0, scale 1: no non-finite gradient values found");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(OverflowLoggerTests)

namespace {

mlframework::StepEvent Step(std::int64_t step, float scale, float new_scale, const OverflowReport* report) {
  return {.Step = step,
          .LossScale = scale,
          .NewLossScale = new_scale,
          .Skipped = report != nullptr,
          .GradientNorm = std::nullopt,
          .Overflow = report};
}

}  // namespace

BOOST_AUTO_TEST_CASE(ABurstOfSixteenOverflowsIsOneLine) {
  std::vector<std::string> lines;
  mlframework::OverflowLogger logger([&](std::string_view line) { lines.emplace_back(line); });
  OverflowReport report;
  report.Ranks = {0};
  report.Tensors.push_back({.Name = "layer3.weight", .NonFiniteCount = 12, .FirstIndex = 0, .HasPosInf = true});
  for (std::int64_t step = 0; step < 10; ++step) logger.OnStep(Step(step, 4.0f, 4.0f, nullptr));
  BOOST_TEST(lines.empty());  // clean steps write nothing
  float scale = std::ldexp(1.0f, 32);
  for (std::int64_t step = 10; step < 26; ++step) {
    report.Step = step;
    logger.OnStep(Step(step, scale, scale / 2.0f, &report));
    scale /= 2.0f;
  }
  BOOST_TEST(lines.empty());  // nothing while the burst lasts
  logger.OnStep(Step(26, scale, scale, nullptr));
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST(lines[0] == "steps 10-25: 16 overflows, scale 2^32 -> 2^16, first: layer3.weight (12 Inf, first at 0)");
  BOOST_TEST(logger.LinesWritten() == 1);
  // An isolated overflow is its own line; the destructor writes a burst still open.
  {
    mlframework::OverflowLogger second([&](std::string_view line) { lines.emplace_back(line); });
    report.Ranks = {1, 3};
    second.OnStep(Step(40, 8.0f, 4.0f, &report));
  }
  BOOST_TEST_REQUIRE(lines.size() == 2u);
  BOOST_TEST(lines[1] ==
             "step 40: 1 overflow, scale 2^3 -> 2^2, first: layer3.weight (12 Inf, first at 0) on ranks 1,3");
}

BOOST_AUTO_TEST_CASE(IntervalWindowsAndFallback) {
  std::ostringstream out;
  {
    mlframework::OverflowLogger logger(out, 4);
    OverflowReport report;
    report.Ranks = {0};
    report.Tensors.push_back({.Name = "w", .NonFiniteCount = 1, .FirstIndex = 2, .HasNaN = true});
    for (std::int64_t step = 0; step < 10; ++step) {
      const bool overflow = step == 1 || step == 2 || step == 5;
      logger.OnStep(Step(step, 3.0f, 3.0f, overflow ? &report : nullptr));
    }
    logger.OnFallbackToFP32(10);
  }
  BOOST_TEST(out.str() ==
             "steps 0-3: 2 overflows, scale 3 -> 3, first: w (1 NaN, first at 2)\n"
             "steps 4-7: 1 overflow, scale 3 -> 3, first: w (1 NaN, first at 2)\n"
             "steps 8-9: 0 overflows, scale 3 -> 3\n"
             "step 10: fell back to FP32 (scale 1 from now on)\n");
}

// A run that overflows on every step at the minimum scale: lines while it runs, one when the
// scale gets to its minimum, each line flushed to the stream.
BOOST_AUTO_TEST_CASE(ALongBurstWritesWhileItRuns) {
  std::vector<std::string> lines;
  mlframework::OverflowLoggerOptions options;
  options.ProgressSteps = 50;
  mlframework::OverflowLogger logger([&](std::string_view line) { lines.emplace_back(line); }, options);
  OverflowReport report;
  report.Ranks = {0};
  report.Tensors.push_back({.Name = "w", .NonFiniteCount = 1, .FirstIndex = 2, .HasNaN = true, .NaNCount = 1});
  report.Tensors.push_back({.Name = "b", .NonFiniteCount = 1, .HasNaN = true, .NaNCount = 1});
  float scale = 4.0f;
  for (std::int64_t step = 0; step < 200; ++step) {
    report.Step = step;
    mlframework::StepEvent event = Step(step, scale, std::max(1.0f, scale / 2.0f), &report);
    event.MinLossScale = 1.0f;
    logger.OnStep(event);
    scale = event.NewLossScale;
  }
  BOOST_TEST_REQUIRE(lines.size() == 5u);  // written during the burst, no clean step needed
  BOOST_TEST(lines[0] == "steps 0-1: 2 overflows, scale 2^2 -> 2^0, first: w (1 NaN, first at 2) and 1 more");
  BOOST_TEST(lines[1] == "step 1: scale reached its minimum 2^0");
  BOOST_TEST(lines[2] ==
             "steps 2-51: 50 overflows (continuing), scale 2^0 -> 2^0, first: w (1 NaN, first at 2) and 1 more");
  BOOST_TEST(lines[4] ==
             "steps 102-151: 50 overflows (continuing), scale 2^0 -> 2^0, first: w (1 NaN, first at 2) and 1 more");
  logger.Flush();
  BOOST_TEST(lines.back() == "steps 152-199: 48 overflows, scale 2^0 -> 2^0, first: w (1 NaN, first at 2) and 1 more");
  // The minimum is announced once until the scale leaves it.
  mlframework::StepEvent up = Step(200, 1.0f, 2.0f, nullptr);
  up.MinLossScale = 1.0f;
  logger.OnStep(up);
  mlframework::StepEvent down = Step(201, 2.0f, 1.0f, &report);
  down.MinLossScale = 1.0f;
  logger.OnStep(down);
  BOOST_TEST(lines.back() == "step 201: scale reached its minimum 2^0");
}

BOOST_AUTO_TEST_CASE(ASlowBurstWritesAfterProgressSeconds) {
  std::ostringstream out;
  mlframework::OverflowLoggerOptions options;
  options.ProgressSeconds = 0.05;
  mlframework::OverflowLogger logger(out, options);
  OverflowReport report;
  report.Ranks = {0};
  report.Tensors.push_back({.Name = "w", .NonFiniteCount = 1, .HasPosInf = true, .PosInfCount = 1});
  logger.OnStep(Step(0, 2.0f, 2.0f, &report));
  BOOST_TEST(out.str().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  logger.OnStep(Step(1, 2.0f, 2.0f, &report));
  BOOST_TEST(out.str() == "steps 0-1: 2 overflows (continuing), scale 2^1 -> 2^1, first: w (1 Inf, first at 0)\n");
}

// A run that diverges and is rolled back to a checkpoint (LoadStateDict(): the step index goes
// back) in the middle of a burst: the burst before the rollback and the one after it are two
// lines, each with its own steps, never "steps 10-6".
BOOST_AUTO_TEST_CASE(AStepIndexThatGoesBackEndsThePendingLine) {
  OverflowReport report;
  report.Ranks = {0};
  report.Tensors.push_back({.Name = "w", .NonFiniteCount = 1, .HasNaN = true, .NaNCount = 1});
  for (const std::int64_t interval : {0, 100}) {
    BOOST_TEST_CONTEXT("interval " << interval) {
      std::vector<std::string> lines;
      mlframework::OverflowLogger logger([&](std::string_view line) { lines.emplace_back(line); }, interval);
      for (const std::int64_t step : {10, 11, 12, 5, 6}) {
        report.Step = step;
        logger.OnStep(Step(step, 8.0f, 8.0f, &report));
      }
      logger.Flush();
      BOOST_TEST(
          lines == (std::vector<std::string>{"steps 10-12: 3 overflows, scale 2^3 -> 2^3, first: w (1 NaN, first at 0)",
                                             "steps 5-6: 2 overflows, scale 2^3 -> 2^3, first: w (1 NaN, first at 0)"}),
          boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(OptionsAreChecked) {
  std::ostringstream out;
  mlframework::OverflowLoggerOptions options;
  options.ProgressSteps = 0;
  BOOST_CHECK_EXCEPTION(mlframework::OverflowLogger(out, options), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) {
                          return std::string(e.what()).find("ProgressSteps") != std::string::npos;
                        });
  options.ProgressSteps = 1;
  options.ProgressSeconds = std::numeric_limits<double>::quiet_NaN();
  BOOST_CHECK_EXCEPTION(mlframework::OverflowLogger(out, options), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) {
                          return std::string(e.what()).find("ProgressSeconds") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(TrainingCsvWriterTests)

BOOST_AUTO_TEST_CASE(HeaderAndOneRowPerStep) {
  std::ostringstream out;
  mlframework::TrainingCsvWriter csv(out);
  OverflowReport report;
  report.Tensors.push_back({.Name = "a.weight", .NonFiniteCount = 1});
  report.Tensors.push_back({.Name = "say \"hi\"", .NonFiniteCount = 2});
  csv.OnStep({.Step = 0, .LossScale = 65536.0f, .NewLossScale = 32768.0f, .Skipped = true, .Overflow = &report});
  csv.OnStep({.Step = 1, .LossScale = 32768.0f, .NewLossScale = 32768.0f, .GradientNorm = 0.25f});
  csv.OnStep({.Step = 2, .LossScale = 0.5f, .NewLossScale = 0.5f});
  BOOST_TEST(out.str() ==
             "step,scale,skipped,grad_norm,overflowing_tensors,new_scale,amax,nan_count,inf_count\n"
             "0,65536,1,,\"a.weight;say \"\"hi\"\"\",32768,,0,0\n"
             "1,32768,0,0.25,\"\",32768,,0,0\n"
             "2,0.5,0,,\"\",0.5,,0,0\n");
  BOOST_TEST(csv.RowsWritten() == 3);
}

BOOST_AUTO_TEST_CASE(NewScaleAmaxAndNonFiniteCounts) {
  std::vector<std::string> rows;
  mlframework::TrainingCsvWriter csv([&](std::string_view line) { rows.emplace_back(line); });
  OverflowReport report;
  report.Tensors.push_back(
      {.Name = "a", .NonFiniteCount = 3, .HasNaN = true, .HasPosInf = true, .NaNCount = 1, .PosInfCount = 2});
  report.Tensors.push_back({.Name = "b", .NonFiniteCount = 4, .HasNegInf = true, .NegInfCount = 4});
  csv.OnStep({.Step = 7,
              .LossScale = 1024.0f,
              .NewLossScale = 512.0f,
              .Skipped = true,
              .GradientAmax = 3.5f,
              .Overflow = &report});
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(rows[1] == "7,1024,1,,\"a;b\",512,3.5,1,6");
}

BOOST_AUTO_TEST_SUITE_END()
