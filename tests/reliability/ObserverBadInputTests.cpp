// Bad input for the overflow reports and observers: null and duplicate observers on every front
// end, empty sinks, negative intervals, null tensors in a scan; every failed call leaves the
// object as it was (the observers registered, the scaler's state).
#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/core/OverflowLogger.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TrainingCsvWriter.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "core/RecordingObserver.hpp"
#include "reliability/BadInputSupport.hpp"

namespace amp = mlframework::amp;
namespace fsdp = mlframework::distributed::fsdp;
namespace mp = mlframework::optimizers::mixed_precision;
using mlframework::ArgumentError;
using mlframework::ArgumentNullError;
using mlframework::DataType;
using mlframework::FromVector;
using mlframework::GradientMap;
using mlframework::TensorPtr;
using mlframework::testing::ExpectError;

namespace {

GradientMap Overflowing() { return {{"w", FromVector({1.0f, std::numeric_limits<float>::infinity()}, {2})}}; }

// AddObserver(null), AddObserver(twice), RemoveObserver(null) on @p front_end: the errors name
// `observer`, and the one registered observer still sees each event once.
template <typename FrontEnd, typename RunStep>
void ExpectObserverErrors(FrontEnd& front_end, RunStep&& run_step) {
  auto observer = std::make_shared<mlfw_test::RecordingObserver>();
  front_end.AddObserver(observer);
  ExpectError<ArgumentNullError>([&] { front_end.AddObserver(nullptr); }, "observer");
  ExpectError<ArgumentError>([&] { front_end.AddObserver(observer); }, "observer");
  ExpectError<ArgumentNullError>([&] { (void)front_end.RemoveObserver(nullptr); }, "observer");
  run_step();
  BOOST_TEST(observer->events.size() >= 2u);
  BOOST_TEST(std::count(observer->events.begin(), observer->events.end(), observer->events.back()) == 1);
  BOOST_TEST(observer->reports.size() == 1u);
  BOOST_TEST(front_end.RemoveObserver(observer));
  BOOST_TEST(!front_end.RemoveObserver(observer));  // not an error: nothing to remove
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ObserverBadInput)

BOOST_AUTO_TEST_CASE(FrontEndsRejectNullAndDuplicateObservers) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 4.0f});
  ExpectObserverErrors(scaler, [&] {
    (void)scaler.Scale(mlframework::Scalar(1.0f));
    BOOST_TEST(scaler.CheckOverflow(Overflowing()));
    scaler.Update();
  });
  mp::GradientConversionLayer layer;
  ExpectObserverErrors(layer, [&] { BOOST_TEST(layer.ProcessGradients(Overflowing()).ShouldSkip); });
  fsdp::FSDP model(mlframework::distributed::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager manager({}, model);
  ExpectObserverErrors(manager, [&] { BOOST_TEST(manager.CheckOverflow(Overflowing())); });
}

BOOST_AUTO_TEST_CASE(BuiltInsRejectEmptySinksAndNegativeIntervals) {
  std::ostringstream out;
  ExpectError<ArgumentNullError>([] { mlframework::OverflowLogger logger(mlframework::OverflowLogger::Sink{}); },
                                 "sink");
  ExpectError<ArgumentError>([&] { mlframework::OverflowLogger logger(out, -1); }, "interval");
  ExpectError<ArgumentError>([] { mlframework::OverflowLogger logger([](std::string_view) {}, -5); }, "interval");
  ExpectError<ArgumentNullError>([] { mlframework::TrainingCsvWriter csv(mlframework::TrainingCsvWriter::Sink{}); },
                                 "sink");
  BOOST_TEST(out.str().empty());  // nothing written by a logger that was never made
}

// A log file that could not be opened (a missing directory, no permission) is refused when the
// logger or writer is made, not found empty after the run.
BOOST_AUTO_TEST_CASE(BuiltInsRejectAStreamThatCannotBeWritten) {
  std::ofstream missing("/nonexistent-directory-of-mlframework-tests/log.txt");
  BOOST_TEST_REQUIRE(!missing.good());
  ExpectError<ArgumentError>([&] { mlframework::OverflowLogger logger(missing); }, "out");
  ExpectError<ArgumentError>([&] { mlframework::OverflowLogger logger(missing, mlframework::OverflowLoggerOptions{}); },
                             "out");
  ExpectError<ArgumentError>([&] { mlframework::TrainingCsvWriter csv(missing); }, "out");
  std::ostringstream failed;
  failed.setstate(std::ios::badbit);
  ExpectError<ArgumentError>([&] { mlframework::TrainingCsvWriter csv(failed); }, "out");
  BOOST_TEST(failed.str().empty());
}

BOOST_AUTO_TEST_CASE(ScansAndReportsRejectNullTensors) {
  const TensorPtr good = FromVector({1.0f}, {1});
  const std::vector<TensorPtr> list{good, nullptr};
  ExpectError<ArgumentNullError>([&] { (void)mlframework::ScanNonFinite(list); }, "tensors[1]");
  ExpectError<ArgumentNullError>([&] { (void)mlframework::OverflowReport::FromTensors(list, 0, 1.0f); }, "tensors[1]");
  const GradientMap with_null{{"a", good}, {"b", nullptr}};
  ExpectError<ArgumentNullError>([&] { (void)mlframework::OverflowReport::FromGradients(with_null, 0, 1.0f); },
                                 "gradients[\"b\"]");
  BOOST_TEST(good->ToFloatVector() == std::vector<float>{1.0f});
  BOOST_TEST_MESSAGE("ObserverBadInput: " << mlframework::testing::BadInputCount() << " bad-input cases so far");
}

BOOST_AUTO_TEST_SUITE_END()
