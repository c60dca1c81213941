#include <mlframework/core/TrainingCsvWriter.hpp>

#include <cstdio>
#include <ostream>
#include <utility>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/Validation.hpp"

namespace mlframework {

namespace {

// A stream that has already failed (a CSV file that could not be opened) would drop every row
// unseen, so it is refused.
std::ostream& Writable(std::ostream& out) {
  if (out.fail()) {
    throw ArgumentError("out",
                        "is a stream in a failed state (a CSV file that could not be opened?): every row "
                        "would be lost");
  }
  return out;
}

std::string Number(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(value));
  return text;
}

}  // namespace

TrainingCsvWriter::TrainingCsvWriter(std::ostream& out)
    : TrainingCsvWriter(Sink([&out = Writable(out)](std::string_view line) { out << line << '\n'
                                                                                 << std::flush; })) {}

TrainingCsvWriter::TrainingCsvWriter(Sink sink) : sink_(std::move(sink)) {
  if (!sink_) {
    throw ArgumentNullError("sink");
  }
  sink_(kHeader);
}

std::string TrainingCsvWriter::Row(const StepEvent& event) {
  std::string row =
      std::to_string(event.Step) + "," + Number(event.LossScale) + "," + (event.Skipped ? "1" : "0") + ",";
  if (event.GradientNorm.has_value()) {
    row += Number(*event.GradientNorm);
  }
  row += ",\"";
  std::uint64_t nan = 0;
  std::uint64_t inf = 0;
  if (event.Overflow != nullptr) {
    bool first = true;
    for (const TensorOverflow& tensor : event.Overflow->Tensors) {
      if (!first) {
        row += ';';
      }
      first = false;
      nan += tensor.NaNCount;
      inf += tensor.PosInfCount + tensor.NegInfCount;
      for (const char c : tensor.Name) {
        row += c;
        if (c == '"') {
          row += '"';  // RFC 4180: a quote inside a quoted field is doubled
        }
      }
    }
  }
  row += "\"," + Number(event.NewLossScale) + ",";
  if (event.GradientAmax.has_value()) {
    row += Number(*event.GradientAmax);
  }
  return row + "," + std::to_string(nan) + "," + std::to_string(inf);
}

void TrainingCsvWriter::OnStep(const StepEvent& event) {
  if (!sink_) {  // a move took the sink
    detail::ThrowMovedFrom("TrainingCsvWriter");
  }
  sink_(Row(event));
  ++rows_;
}

}  // namespace mlframework
