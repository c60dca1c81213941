// The non-blocking collectives (IProcessGroup::*Async): bit-identical to the blocking ones for
// every dtype and reduction method, several in flight at once, Test() and Wait() in any order,
// a request destroyed without a wait, and the completed requests of the blocking default.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
using mlframework::DataType;
using mlframework::TensorPtr;

namespace {

using mlfw_test::Make;
using mlfw_test::RankValues;

std::vector<dist::MpiProcessGroupOptions> MethodsUnderTest() {
  std::vector<dist::MpiProcessGroupOptions> methods;
  methods.push_back({});  // the all-to-all defaults
  methods.push_back({.HalfSum = dist::HalfReduction::UserOp, .Float32Sum = dist::Float32Reduction::Builtin});
  methods.push_back({.HalfSum = dist::HalfReduction::ConvertToFloat32});
  return methods;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ProcessGroupAsync)

BOOST_AUTO_TEST_CASE(AsyncResultsAreTheBitsOfTheBlockingOnes) {
  for (std::size_t m = 0; m < MethodsUnderTest().size(); ++m) {
    const dist::MpiProcessGroupOptions options = MethodsUnderTest()[m];
    auto group = mlfw_test::WorldGroup(options);
    const int world = group->WorldSize();
    const int rank = group->Rank();
    // The all-to-all methods combine in rank order in both forms; MPI's own algorithms may sum
    // in another order than their non-blocking twins beyond two ranks.
    const bool exact = m == 0 || world <= 2 || group->BackendName() != "mpi";
    for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      BOOST_TEST_CONTEXT("method " << m << ", dtype " << mlframework::ToString(dtype)) {
        const std::size_t count = 1000;  // per rank
        const auto input = RankValues(count * static_cast<std::size_t>(world), rank, 0.5f);
        auto scatter_in = Make(input, dtype);
        auto blocking_out = mlframework::Zeros({count}, dtype);
        auto async_out = mlframework::Zeros({count}, dtype);
        group->ReduceScatter(*scatter_in, *blocking_out);
        auto request = group->ReduceScatterAsync(*scatter_in, *async_out);
        request->Wait();
        request->Wait();  // a second wait returns at once
        BOOST_TEST(request->Test());
        auto reduce_blocking = Make(RankValues(777, rank, 1.5f), dtype);
        auto reduce_async = Make(RankValues(777, rank, 1.5f), dtype);
        group->AllReduce(*reduce_blocking);
        auto all_reduce = group->AllReduceAsync(*reduce_async);
        while (!all_reduce->Test()) {
        }
        if (exact) {
          BOOST_TEST(async_out->ToFloatVector() == blocking_out->ToFloatVector(), boost::test_tools::per_element());
          BOOST_TEST(reduce_async->ToFloatVector() == reduce_blocking->ToFloatVector(),
                     boost::test_tools::per_element());
        } else {
          BOOST_TEST(mlfw_test::RelativeDifference(async_out->ToFloatVector(), blocking_out->ToFloatVector()) < 1e-2);
        }
        // Max is exact in any order.
        auto max_blocking = Make(RankValues(333, rank, 2.5f), dtype);
        auto max_async = Make(RankValues(333, rank, 2.5f), dtype);
        group->AllReduce(*max_blocking, dist::ReduceOp::Max);
        group->AllReduceAsync(*max_async, dist::ReduceOp::Max)->Wait();
        BOOST_TEST(max_async->ToFloatVector() == max_blocking->ToFloatVector(), boost::test_tools::per_element());

        // All-gather, in place (the input is this rank's slot of the output) and not.
        auto shard = Make(RankValues(count, rank, 3.5f), dtype);
        auto gathered_blocking = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
        auto gathered_async = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
        group->AllGather(*shard, *gathered_blocking);
        group->AllGatherAsync(*shard, *gathered_async)->Wait();
        BOOST_TEST(gathered_async->ToFloatVector() == gathered_blocking->ToFloatVector(),
                   boost::test_tools::per_element());
        auto in_place = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
        const TensorPtr slot = in_place->Backend()->View(in_place, count * static_cast<std::size_t>(rank), {count});
        slot->CopyFromFloats(shard->ToFloatVector());
        group->AllGatherAsync(*slot, *in_place)->Wait();
        BOOST_TEST(in_place->ToFloatVector() == gathered_blocking->ToFloatVector(), boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SeveralInFlightCompleteInAnyOrderAndDestroyedOnesComplete) {
  auto group = mlfw_test::WorldGroup();
  const int world = group->WorldSize();
  const int rank = group->Rank();
  constexpr std::size_t kCount = 4096;
  std::vector<TensorPtr> inputs;
  std::vector<TensorPtr> outputs;
  std::vector<TensorPtr> expected;
  std::vector<dist::CollectiveRequestPtr> requests;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(Make(RankValues(kCount * static_cast<std::size_t>(world), rank, 0.1f * static_cast<float>(i)),
                          DataType::BFloat16));
    outputs.push_back(mlframework::Zeros({kCount}, DataType::BFloat16));
    expected.push_back(mlframework::Zeros({kCount}, DataType::BFloat16));
  }
  // All-reduces have a second stage started by whichever thread polls first: several in flight
  // must still start it in the same order on every rank.
  std::vector<TensorPtr> sums;
  std::vector<TensorPtr> sums_expected;
  for (int i = 0; i < 3; ++i) {
    sums.push_back(Make(RankValues(kCount + 3, rank, 0.7f * static_cast<float>(i)), DataType::Float32));
    sums_expected.push_back(sums.back()->Clone());
    group->AllReduce(*sums_expected.back());
  }
  for (int i = 0; i < 4; ++i) group->ReduceScatter(*inputs[i], *expected[i]);
  for (int i = 0; i < 4; ++i) {
    requests.push_back(group->ReduceScatterAsync(*inputs[i], *outputs[i]));
    if (i < 3) requests.push_back(group->AllReduceAsync(*sums[i]));
  }
  // A blocking collective while they are in flight, then waits in reverse order.
  const double total = group->AllReduceHost(1.0, dist::ReduceOp::Sum);
  BOOST_TEST(total == static_cast<double>(world));
  std::for_each(requests.rbegin(), requests.rend(), [](const auto& request) { request->Wait(); });
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(outputs[i]->ToFloatVector() == expected[i]->ToFloatVector(), boost::test_tools::per_element());
  }
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(sums[i]->ToFloatVector() == sums_expected[i]->ToFloatVector(), boost::test_tools::per_element());
  }
  // Destroyed without a wait: the destructor completes it, so the output is final.
  auto output = mlframework::Zeros({kCount}, DataType::BFloat16);
  group->ReduceScatterAsync(*inputs[0], *output).reset();
  BOOST_TEST(output->ToFloatVector() == expected[0]->ToFloatVector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ArgumentErrorsThrowBeforeAnyCommunication) {
  auto group = mlfw_test::WorldGroup();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  auto input = mlframework::Zeros({8 * world});
  auto wrong = mlframework::Zeros({8 * world + 1});
  BOOST_CHECK_THROW(group->ReduceScatterAsync(*input, *wrong), mlframework::ArgumentError);
  auto half = mlframework::Zeros({8}, DataType::Float16);
  BOOST_CHECK_THROW(group->AllGatherAsync(*half, *input), mlframework::ArgumentError);
  // The group still works afterwards (no rank entered a collective).
  auto out = mlframework::Zeros({8});
  group->ReduceScatterAsync(*input, *out)->Wait();
  BOOST_TEST(out->ToFloatVector() == std::vector<float>(8, 0.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(TheBlockingDefaultReturnsACompletedRequest) {
  dist::LocalProcessGroup local;
  auto input = mlframework::FromVector({1.0f, 2.0f, 3.0f}, {3});
  auto output = mlframework::Zeros({3});
  auto request = local.ReduceScatterAsync(*input, *output);
  BOOST_TEST(request->Test());  // already complete: the local group copies at the call
  BOOST_TEST(output->ToFloatVector() == input->ToFloatVector(), boost::test_tools::per_element());
  request->Wait();
  auto tensor = mlframework::FromVector({4.0f, 5.0f}, {2});
  local.AllReduceAsync(*tensor)->Wait();
  BOOST_TEST(tensor->ToFloatVector() == std::vector<float>({4.0f, 5.0f}), boost::test_tools::per_element());
}

// The forms with attached work: an in-place all-gather whose slot `prepare` writes (FSDP's cast)
// and a reduce-scatter followed by `finish` (FSDP's averaging) give the bits of the blocking
// calls around the same work, with several in flight among the other collectives (the MPI
// engine starts the gathers on another communicator, in call order); each work runs once,
// before its request completes.
BOOST_AUTO_TEST_CASE(AttachedWorkRunsOnceBeforeCompletionWithTheBlockingBits) {
  for (std::size_t m = 0; m < MethodsUnderTest().size(); ++m) {
    auto group = mlfw_test::WorldGroup(MethodsUnderTest()[m]);
    const auto world = static_cast<std::size_t>(group->WorldSize());
    const auto me = static_cast<std::size_t>(group->Rank());
    constexpr std::size_t kCount = 3000;
    constexpr std::size_t kEach = 3;
    BOOST_TEST_CONTEXT("method " << m) {
      std::vector<int> runs(2 * kEach, 0);
      std::vector<TensorPtr> sources;
      std::vector<TensorPtr> gathered;
      std::vector<TensorPtr> scatter_inputs;
      std::vector<TensorPtr> scattered;
      std::vector<dist::CollectiveRequestPtr> requests;
      for (std::size_t i = 0; i < kEach; ++i) {
        const float salt = 0.3f * static_cast<float>(i);
        sources.push_back(Make(RankValues(kCount, group->Rank(), salt), DataType::Float32));
        gathered.push_back(mlframework::Zeros({kCount * world}, DataType::BFloat16));
        const TensorPtr slot = gathered.back()->Backend()->View(gathered.back(), kCount * me, {kCount});
        requests.push_back(group->AllGatherAsyncAfter(
            [source = sources.back(), slot, &runs, i] {
              mlframework::CopyInto(std::span<const TensorPtr>(&source, 1), std::span<const TensorPtr>(&slot, 1));
              ++runs[i];
            },
            *slot, *gathered.back()));
        scatter_inputs.push_back(Make(RankValues(kCount * world, group->Rank(), salt + 0.1f), DataType::Float32));
        scattered.push_back(mlframework::Zeros({kCount}));
        requests.push_back(group->ReduceScatterAsyncThen(
            *scatter_inputs.back(), *scattered.back(), dist::ReduceOp::Sum, [out = scattered.back(), &runs, i] {
              mlframework::ScaleInPlace(std::span<const TensorPtr>(&out, 1), 0.5f);
              ++runs[kEach + i];
            }));
        // Plain collectives in between, blocking and not, in the same order on every rank.
        BOOST_TEST(group->AllReduceHost(1.0, dist::ReduceOp::Sum) == static_cast<double>(world));
        auto plain = mlframework::Zeros({kCount});
        requests.push_back(group->ReduceScatterAsync(*scatter_inputs.back(), *plain));
        requests.back()->Wait();
      }
      std::for_each(requests.rbegin(), requests.rend(), [](const auto& request) { request->Wait(); });
      requests[0]->Wait();  // a second wait runs nothing again
      BOOST_TEST(runs == std::vector<int>(2 * kEach, 1), boost::test_tools::per_element());
      for (std::size_t k = 0; k < kEach; ++k) {
        auto expected = mlframework::Zeros({kCount * world}, DataType::BFloat16);
        const TensorPtr slot = expected->Backend()->View(expected, kCount * me, {kCount});
        mlframework::CopyInto(std::span<const TensorPtr>(&sources[k], 1), std::span<const TensorPtr>(&slot, 1));
        group->AllGather(*slot, *expected);
        BOOST_TEST(gathered[k]->ToFloatVector() == expected->ToFloatVector(), boost::test_tools::per_element());
        auto sum = mlframework::Zeros({kCount});
        group->ReduceScatter(*scatter_inputs[k], *sum);
        mlframework::ScaleInPlace(std::span<const TensorPtr>(&sum, 1), 0.5f);
        BOOST_TEST(scattered[k]->ToFloatVector() == sum->ToFloatVector(), boost::test_tools::per_element());
      }
    }
  }
}

// Attached work that throws on every rank: its exception reaches the caller (from the call or
// the wait, again from a second wait), nothing is left half-started and the group still works.
BOOST_AUTO_TEST_CASE(AttachedWorkFailuresReachTheCaller) {
  for (const bool local : {true, false}) {
    std::shared_ptr<dist::IProcessGroup> group = mlfw_test::WorldGroup();
    if (local) group = std::make_shared<dist::LocalProcessGroup>();  // the blocking defaults
    const auto world = static_cast<std::size_t>(group->WorldSize());
    const auto me = static_cast<std::size_t>(group->Rank());
    BOOST_TEST_CONTEXT((local ? "local" : group->BackendName())) {
      const auto fail = [] { throw mlframework::InvalidOperationError("attached work failed"); };
      auto input = Make(RankValues(8 * world, group->Rank(), 0.4f), DataType::Float32);
      auto output = mlframework::Zeros({8});
      auto request = group->ReduceScatterAsyncThen(*input, *output, dist::ReduceOp::Sum, fail);
      BOOST_CHECK_THROW(request->Wait(), mlframework::InvalidOperationError);
      BOOST_CHECK_THROW(request->Wait(), mlframework::InvalidOperationError);
      auto out = mlframework::Zeros({8 * world});
      const TensorPtr slot = out->Backend()->View(out, 8 * me, {8});
      BOOST_CHECK_THROW(group->AllGatherAsyncAfter(fail, *slot, *out)->Wait(), mlframework::InvalidOperationError);
      // A later gather on the same path starts and completes.
      slot->CopyFromFloats(std::vector<float>(8, static_cast<float>(me + 1)));
      group->AllGatherAsyncAfter([] {}, *slot, *out)->Wait();
      std::vector<float> expected;
      for (std::size_t r = 0; r < world; ++r) expected.insert(expected.end(), 8, static_cast<float>(r + 1));
      BOOST_TEST(out->ToFloatVector() == expected, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
