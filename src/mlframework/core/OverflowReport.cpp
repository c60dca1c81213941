#include <mlframework/core/OverflowReport.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/HostNonFiniteScan.hpp"

namespace mlframework {

namespace {

// "65536" for scales that are whole numbers, else "%g".
std::string FormatWholeScale(float scale) {
  char text[32];
  if (std::isfinite(scale) && scale == std::floor(scale) && std::fabs(scale) < 1e15f) {
    std::snprintf(text, sizeof text, "%.0f", static_cast<double>(scale));
  } else {
    std::snprintf(text, sizeof text, "%g", static_cast<double>(scale));
  }
  return text;
}

}  // namespace

std::string TensorOverflow::ToString() const {
  std::string kinds;
  const auto add = [&kinds](bool present, const char* kind) {
    if (present) {
      if (!kinds.empty()) {
        kinds += ", ";
      }
      kinds += kind;
    }
  };
  const std::string first = ", first at " + std::to_string(FirstIndex) + ")";
  const bool mixed = static_cast<int>(HasNaN) + static_cast<int>(HasPosInf) + static_cast<int>(HasNegInf) > 1;
  if (mixed && NaNCount + PosInfCount + NegInfCount == NonFiniteCount) {
    const auto counted = [&add](bool present, std::uint64_t count, const char* kind) {
      add(present, (std::to_string(count) + " " + kind).c_str());
    };
    counted(HasNaN, NaNCount, "NaN");
    counted(HasPosInf, PosInfCount, "+Inf");
    counted(HasNegInf, NegInfCount, "-Inf");
    return Name + " (" + kinds + first;
  }
  // A single kind reads "12 Inf" / "12 NaN"; mixed kinds without their counts are listed.
  if (HasPosInf && !HasNegInf && !HasNaN) {
    kinds = "Inf";
  } else if (HasNegInf && !HasPosInf && !HasNaN) {
    kinds = "-Inf";
  } else {
    add(HasNaN, "NaN");
    add(HasPosInf, "+Inf");
    add(HasNegInf, "-Inf");
  }
  return Name + " (" + std::to_string(NonFiniteCount) + " " + kinds + first;
}

void OverflowReport::OrderBy(std::span<const std::string> names) {
  if (names.empty() || Tensors.size() < 2) {
    return;
  }
  std::map<std::string_view, std::size_t> position;
  for (std::size_t i = 0; i < names.size(); ++i) {
    position.emplace(names[i], i);  // the first mention counts
  }
  const auto rank = [&position](const TensorOverflow& t) {
    const auto it = position.find(t.Name);
    return it == position.end() ? std::numeric_limits<std::size_t>::max() : it->second;
  };
  std::stable_sort(Tensors.begin(), Tensors.end(),
                   [&rank](const TensorOverflow& a, const TensorOverflow& b) { return rank(a) < rank(b); });
}

std::string OverflowReport::ToString() const {
  std::string text = "step " + std::to_string(Step) + ", scale " + FormatWholeScale(LossScale);
  if (!Ranks.empty()) {  // a report whose scan found nothing has no rank to name
    text += Ranks.size() == 1 ? ", rank " : ", ranks ";
  }
  for (std::size_t i = 0; i < Ranks.size(); ++i) {
    if (i != 0) {
      text += ',';
    }
    text += std::to_string(Ranks[i]);
  }
  text += ":";
  for (std::size_t i = 0; i < Tensors.size(); ++i) {
    text += i == 0 ? " " : ", ";
    text += Tensors[i].ToString();
  }
  if (Tensors.empty()) {
    text += " no non-finite gradient values found";
  }
  return text;
}

namespace {

// The report of @p tensors, named by name_of(i).
template <typename NameOf>
OverflowReport Build(std::span<const TensorPtr> tensors, std::int64_t step, float scale, int rank, NameOf&& name_of) {
  const std::vector<NonFiniteScan> scans = ScanNonFinite(tensors);
  OverflowReport report;
  report.Step = step;
  report.LossScale = scale;
  for (std::size_t i = 0; i < scans.size(); ++i) {
    const NonFiniteScan& scan = scans[i];
    if (scan.Count == 0) {
      continue;
    }
    report.Tensors.push_back(TensorOverflow{.Name = name_of(i),
                                            .NonFiniteCount = scan.Count,
                                            .FirstIndex = scan.FirstIndex,
                                            .HasNaN = scan.HasNaN,
                                            .HasPosInf = scan.HasPosInf,
                                            .HasNegInf = scan.HasNegInf,
                                            .NaNCount = scan.NaNCount,
                                            .PosInfCount = scan.PosInfCount,
                                            .NegInfCount = scan.NegInfCount});
  }
  if (!report.Tensors.empty()) {
    report.Ranks.push_back(rank);
  }
  return report;
}

}  // namespace

OverflowReport OverflowReport::FromGradients(const GradientMap& gradients, std::int64_t step, float loss_scale,
                                             int rank) {
  const std::vector<TensorPtr> list = TensorList(gradients);
  std::vector<const std::string*> names;
  names.reserve(gradients.size());
  for (const auto& entry : gradients) names.push_back(&entry.first);
  return Build(list, step, loss_scale, rank, [&](std::size_t i) { return *names[i]; });
}

OverflowReport OverflowReport::FromTensors(std::span<const TensorPtr> tensors, std::int64_t step, float loss_scale,
                                           int rank) {
  return Build(tensors, step, loss_scale, rank, [](std::size_t i) {
    std::string name(1, '#');
    name += std::to_string(i);
    return name;
  });
}

std::vector<NonFiniteScan> ScanNonFinite(std::span<const TensorPtr> tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError("tensors[" + std::to_string(i) + "]");
    }
  }
  std::vector<NonFiniteScan> scans(tensors.size());
  // Runs of tensors of one backend go in one call, so a device backend waits once per run.
  std::vector<const ITensor*> run;
  std::size_t begin = 0;
  while (begin < tensors.size()) {
    const TensorBackend* backend = tensors[begin]->Backend();
    std::size_t end = begin;
    run.clear();
    while (end < tensors.size() && tensors[end]->Backend() == backend) {
      run.push_back(tensors[end].get());
      ++end;
    }
    const std::span<NonFiniteScan> out(scans.data() + begin, end - begin);
    if (backend != nullptr) {
      backend->ScanNonFinite(run, out);
    } else {
      for (std::size_t k = 0; k < run.size(); ++k) out[k] = detail::HostScanNonFinite(*run[k]);
    }
    begin = end;
  }
  return scans;
}

}  // namespace mlframework
