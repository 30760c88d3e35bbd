// Tests of the state between an atomic wave's phases and its averaging
// (bazel test //:wave_test), on tensors of the test's own, without
// TensorFlow.
//
// Checks as cc/runtime/check.h makes them.
#include "cc/runtime/wave.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cc/runtime/check.h"

namespace tensorbow {
namespace runtime {
namespace {

constexpr int kFloat = kTfFloat;
constexpr int kDouble = kTfDouble;
constexpr int kInt32 = 3;  // TF_INT32

// A tensor as KeptWave sees one: dtype, dims and bytes it owns.
class FakeTensor {
 public:
  FakeTensor() = default;
  FakeTensor(int dtype, std::vector<int64_t> dims, size_t element_size)
      : dtype_(dtype), dims_(std::move(dims)) {
    size_t n = element_size;
    for (int64_t d : dims_) n *= static_cast<size_t>(d);
    bytes_.resize(n);
  }

  template <typename T>
  static FakeTensor Of(int dtype, const std::vector<T>& values) {
    FakeTensor t(dtype, {static_cast<int64_t>(values.size())}, sizeof(T));
    std::memcpy(t.data(), values.data(), t.nbytes());
    return t;
  }

  static FakeTensor Allocate(int dtype, const std::vector<int64_t>& dims) {
    return FakeTensor(dtype, dims, dtype == kFloat ? 4 : 8);
  }

  int dtype() const { return dtype_; }
  std::vector<int64_t> dims() const { return dims_; }
  void* data() const { return const_cast<char*>(bytes_.data()); }
  size_t nbytes() const { return bytes_.size(); }

  template <typename T>
  std::vector<T> Values() const {
    std::vector<T> out(nbytes() / sizeof(T));
    std::memcpy(out.data(), data(), nbytes());
    return out;
  }

 private:
  int dtype_ = 0;
  std::vector<int64_t> dims_;
  std::vector<char> bytes_;
};

using Wave = KeptWave<std::string, FakeTensor>;

// One replica's outputs: `fetched` ordinary fetches, then `kept`.
std::vector<FakeTensor> Outputs(int fetched, std::vector<FakeTensor> kept) {
  std::vector<FakeTensor> out;
  for (int i = 0; i < fetched; ++i) {
    out.push_back(FakeTensor::Of<int32_t>(kInt32, {i}));
  }
  for (FakeTensor& t : kept) out.push_back(std::move(t));
  return out;
}

// Keep takes the last `internal` outputs of each replica, and the feeds;
// the ordinary fetches stay with the caller.
void TestKeepSplitsOutputs() {
  Wave wave;
  EXPECT(wave.replicas() == 0);
  std::vector<std::vector<FakeTensor>> outputs;
  outputs.push_back(Outputs(2, {FakeTensor::Of<float>(kFloat, {1, 2})}));
  outputs.push_back(Outputs(2, {FakeTensor::Of<float>(kFloat, {3, 4})}));
  wave.Keep({{"x0"}, {"x1"}}, &outputs, 1);
  EXPECT(wave.replicas() == 2);
  EXPECT(outputs[0].size() == 2 && outputs[1].size() == 2);
  const auto kept = wave.Tensors();
  EXPECT(kept.size() == 2 && kept[0].size() == 1 && kept[1].size() == 1);
  EXPECT(kept[1][0]->Values<float>() == std::vector<float>({3, 4}));
  const auto feeds = wave.TakeFeeds();
  EXPECT(feeds.size() == 2 && feeds[1][0] == "x1");
  // The tensors stay for the commit after the feeds are taken.
  EXPECT(wave.Tensors()[0][0]->Values<float>() ==
         std::vector<float>({1, 2}));
  wave.Discard();
  EXPECT(wave.replicas() == 0);
}

// A commit must match the kept wave: one flag per replica, and one call
// per replica unless calls are per stream group.
void TestCheckCommit() {
  Wave wave;
  EXPECT(wave.CheckCommit(2, false, 2).code() == kInvalidArgument);
  std::vector<std::vector<FakeTensor>> outputs(2);
  wave.Keep({{}, {}}, &outputs, 0);
  EXPECT(wave.CheckCommit(2, false, 2).ok());
  EXPECT(wave.CheckCommit(2, true, 1).ok());
  EXPECT(!wave.CheckCommit(3, false, 3).ok());
  const Status s = wave.CheckCommit(2, false, 1);
  EXPECT(s.code() == kInvalidArgument);
  EXPECT(s.message() == "TensorBow: Commit needs a computed wave");
}

// float and double tensors become the weighted mean, summed in double,
// each replica's in a tensor of its own; int tensors stay as they are.
void TestAverageWeightsAndSumsInDouble() {
  Wave wave;
  std::vector<std::vector<FakeTensor>> outputs;
  outputs.push_back(Outputs(0, {FakeTensor::Of<float>(kFloat, {1e8f, 2}),
                                FakeTensor::Of<double>(kDouble, {4}),
                                FakeTensor::Of<int32_t>(kInt32, {7})}));
  outputs.push_back(Outputs(0, {FakeTensor::Of<float>(kFloat, {1, 6}),
                                FakeTensor::Of<double>(kDouble, {8}),
                                FakeTensor::Of<int32_t>(kInt32, {7})}));
  outputs.push_back(Outputs(0, {FakeTensor::Of<float>(kFloat, {-1e8f, 10}),
                                FakeTensor::Of<double>(kDouble, {16}),
                                FakeTensor::Of<int32_t>(kInt32, {7})}));
  wave.Keep({{}, {}, {}}, &outputs, 3);
  const void* before = wave.Tensors()[0][0]->data();
  EXPECT(wave.Average({0.25, 0.5, 0.25}).ok());
  const auto kept = wave.Tensors();
  for (int r = 0; r < 3; ++r) {
    // 0.25 * 1e8 + 0.5 * 1 - 0.25 * 1e8: 0.5, where a float sum gives 0.
    EXPECT(kept[r][0]->Values<float>() == std::vector<float>({0.5f, 6.0f}));
    EXPECT(kept[r][1]->Values<double>() == std::vector<double>({9.0}));
    EXPECT(kept[r][2]->Values<int32_t>() == std::vector<int32_t>({7}));
  }
  EXPECT(kept[0][0]->data() != before);
  EXPECT(kept[0][0]->data() != kept[1][0]->data());
}

void TestAverageRefusesWhatCannotBeAveraged() {
  const char* kShapes =
      "TensorBow: the replicas computed tensors of different shapes for "
      "their update (a sparse gradient?); they cannot be averaged";
  const char* kDiffer =
      "TensorBow: the replicas computed different non-floating tensors for "
      "their update; they cannot be averaged";
  struct Case {
    FakeTensor a, b;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({FakeTensor::Of<float>(kFloat, {1, 2}),
                   FakeTensor::Of<float>(kFloat, {1, 2, 3}), kShapes});
  cases.push_back({FakeTensor::Of<float>(kFloat, {1}),
                   FakeTensor::Of<double>(kDouble, {1}), kShapes});
  cases.push_back({FakeTensor::Of<int32_t>(kInt32, {1}),
                   FakeTensor::Of<int32_t>(kInt32, {2}), kDiffer});
  for (Case& c : cases) {
    Wave wave;
    std::vector<std::vector<FakeTensor>> outputs(2);
    outputs[0].push_back(std::move(c.a));
    outputs[1].push_back(std::move(c.b));
    wave.Keep({{}, {}}, &outputs, 1);
    const Status s = wave.Average({0.5, 0.5});
    EXPECT(s.code() == kInvalidArgument);
    EXPECT(s.message() == c.message);
  }
  Wave wave;
  EXPECT(wave.Average({1.0}).message() ==
         "TensorBow: AverageKept needs a computed wave");
  std::vector<std::vector<FakeTensor>> outputs(2);
  wave.Keep({{}, {}}, &outputs, 0);
  EXPECT(wave.Average({1.0}).code() == kInvalidArgument);
  EXPECT(wave.Average({0.5, 0.5}).ok());
}

// A worker's share of synchronous SGD: Sums gives the weighted sums of
// the averaged tensors only, in double, changing nothing; Replace sets
// every replica's to the values given, and refuses values of another
// count or size, changing nothing.
void TestSumsAndReplace() {
  Wave wave;
  std::vector<std::vector<double>> sums;
  EXPECT(wave.Sums({1.0}, &sums).code() == kInvalidArgument);
  EXPECT(wave.Replace({}).code() == kInvalidArgument);
  std::vector<std::vector<FakeTensor>> outputs;
  outputs.push_back(Outputs(0, {FakeTensor::Of<float>(kFloat, {1e8f, 2}),
                                FakeTensor::Of<int32_t>(kInt32, {7}),
                                FakeTensor::Of<double>(kDouble, {4})}));
  outputs.push_back(Outputs(0, {FakeTensor::Of<float>(kFloat, {-1e8f, 1}),
                                FakeTensor::Of<int32_t>(kInt32, {7}),
                                FakeTensor::Of<double>(kDouble, {8})}));
  wave.Keep({{}, {}}, &outputs, 3);
  EXPECT(wave.Sums({3.0, 3.0}, &sums).ok());
  EXPECT(sums.size() == 2);
  EXPECT(sums[0] == std::vector<double>({0.0, 9.0}));
  EXPECT(sums[1] == std::vector<double>({36.0}));
  EXPECT(wave.Tensors()[1][0]->Values<float>() ==
         std::vector<float>({-1e8f, 1}));
  const char* kSizes =
      "TensorBow: ReplaceKept needs one value of each averaged tensor's "
      "size";
  EXPECT(wave.Replace({{0.5, 1.5}}).message() == kSizes);
  EXPECT(wave.Replace({{0.5}, {2.5}}).message() == kSizes);
  EXPECT(wave.Replace({{0.5, 1.5}, {2.5}, {3.5}}).message() == kSizes);
  EXPECT(wave.Tensors()[0][0]->Values<float>() ==
         std::vector<float>({1e8f, 2}));
  EXPECT(wave.Replace({{0.5, 1.5}, {2.5}}).ok());
  for (int r = 0; r < 2; ++r) {
    const auto kept = wave.Tensors()[r];
    EXPECT(kept[0]->Values<float>() == std::vector<float>({0.5f, 1.5f}));
    EXPECT(kept[1]->Values<int32_t>() == std::vector<int32_t>({7}));
    EXPECT(kept[2]->Values<double>() == std::vector<double>({2.5}));
  }
}

}  // namespace
}  // namespace runtime
}  // namespace tensorbow

int main() {
  using namespace tensorbow::runtime;  // NOLINT(build/namespaces)
  TestKeepSplitsOutputs();
  TestCheckCommit();
  TestAverageWeightsAndSumsInDouble();
  TestAverageRefusesWhatCannotBeAveraged();
  TestSumsAndReplace();
  return Failed("wave_test");
}
