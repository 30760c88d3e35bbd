// The test doubles of a WaveRunner's session, tensors and arenas
// (wave_runner.h), for wave_runner_test.cc: a session that records what
// each learning task was fed and answers as the test says, without
// TensorFlow.
#ifndef TENSORBOW_CC_RUNTIME_FAKE_SESSION_H_
#define TENSORBOW_CC_RUNTIME_FAKE_SESSION_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cc/runtime/host_tensor.h"
#include "cc/runtime/status.h"
#include "cc/runtime/wave.h"

namespace tensorbow {
namespace runtime {

// A fetched tensor as the runner sees one: float32 (or, made by
// Allocate, float64) values it owns.
class FakeTensor {
 public:
  FakeTensor() = default;
  explicit FakeTensor(const std::vector<float>& values)
      : dtype_(kTfFloat), dims_{static_cast<int64_t>(values.size())},
        bytes_(values.size() * sizeof(float)) {
    if (!values.empty()) std::memcpy(bytes_.data(), values.data(), nbytes());
  }

  static FakeTensor Allocate(int dtype, const std::vector<int64_t>& dims) {
    FakeTensor t;
    t.dtype_ = dtype;
    t.dims_ = dims;
    size_t n = dtype == kTfFloat ? sizeof(float) : sizeof(double);
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    t.bytes_.resize(n);
    return t;
  }

  int dtype() const { return dtype_; }
  std::vector<int64_t> dims() const { return dims_; }
  void* data() const { return const_cast<char*>(bytes_.data()); }
  size_t nbytes() const { return bytes_.size(); }
  bool AllFinite() const {
    for (float v : Values()) {
      if (!std::isfinite(v)) return false;
    }
    return true;
  }

  std::vector<float> Values() const {
    std::vector<float> out(nbytes() / sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), data(), nbytes());
    return out;
  }

 private:
  int dtype_ = 0;
  std::vector<int64_t> dims_;
  std::vector<char> bytes_;
};

// A stream group's arena: its name, and a count of those alive.
class FakeArena {
 public:
  static FakeArena* New(const std::string& name) {
    ++Alive();
    return new FakeArena(name);
  }
  void Unref() {
    --Alive();
    delete this;
  }
  const std::string& name() const { return name_; }
  static int& Alive() {
    static int alive = 0;
    return alive;
  }

 private:
  explicit FakeArena(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// One feed as a task was given it: float32 and int32 elements as doubles.
struct Fed {
  int dtype;
  std::vector<int64_t> dims;
  std::vector<double> values;
  std::vector<std::string> strings;
};

// What one run of the fake session was given.
struct FakeRun {
  int call;
  std::vector<Fed> feeds;
  std::vector<std::vector<float>> kept;
  std::string options;
  bool wants_metadata;
  size_t internal;
  std::string arena;  // "" for none
  int order;          // among the session's runs, from 0

  // The stream group that ran it, read from its arena's name.
  int stream_group() const {
    return arena.empty() ? -1 : std::atoi(arena.substr(arena.rfind('_') + 1)
                                              .c_str());
  }
  // Its last feed: a replica index, with calls per stream group.
  int replica() const { return static_cast<int>(feeds.back().values[0]); }
};

inline Fed Decode(const HostTensor& t) {
  Fed fed{t.dtype, t.dims, {}, t.strings};
  const size_t n = t.nbytes / 4;
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == kTfFloat) {
      fed.values.push_back(static_cast<const float*>(t.data)[i]);
    } else if (t.dtype == kTfInt32) {
      fed.values.push_back(static_cast<const int32_t*>(t.data)[i]);
    }
  }
  return fed;
}

// Records every run; answers with `respond`, by default [call, the first
// feed's values] as float32 tensors.
class FakeSession {
 public:
  using Respond =
      std::function<Status(const FakeRun& run, std::vector<FakeTensor>*)>;

  explicit FakeSession(Respond respond = nullptr)
      : respond_(std::move(respond)) {}

  Status Run(int call, const std::vector<HostTensor>& feeds,
             const std::vector<const FakeTensor*>& kept,
             const std::string& run_options,
             std::vector<FakeTensor>* outputs, std::string* run_metadata,
             size_t internal, FakeArena* arena) const {
    FakeRun run{call, {}, {}, run_options, run_metadata != nullptr,
                internal, arena != nullptr ? arena->name() : "", 0};
    for (const HostTensor& t : feeds) run.feeds.push_back(Decode(t));
    for (const FakeTensor* t : kept) run.kept.push_back(t->Values());
    {
      std::lock_guard<std::mutex> lock(mu_);
      run.order = static_cast<int>(runs_.size());
      runs_.push_back(run);
    }
    if (run_metadata != nullptr) {
      *run_metadata = "metadata of call " + std::to_string(call);
    }
    outputs->clear();
    if (respond_) return respond_(run, outputs);
    std::vector<float> first;
    if (!run.feeds.empty()) {
      for (double v : run.feeds[0].values) first.push_back(v);
    }
    outputs->emplace_back(std::vector<float>{static_cast<float>(call)});
    outputs->emplace_back(first);
    return Status::Ok();
  }

  std::vector<FakeRun> runs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }

 private:
  const Respond respond_;
  mutable std::mutex mu_;
  mutable std::vector<FakeRun> runs_;
};

// A float32 feed over `values` (borrowed), of `dims`.
inline HostTensor FloatFeed(std::vector<float>* values, std::vector<int64_t> dims) {
  HostTensor t;
  t.dtype = kTfFloat;
  t.dims = std::move(dims);
  t.data = values->data();
  t.nbytes = values->size() * sizeof(float);
  return t;
}

inline std::vector<double> Doubles(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// The run among `runs` of call `call` whose first feed starts with
// `first`, or null.
inline const FakeRun* Find(const std::vector<FakeRun>& runs, int call,
                    double first) {
  for (const FakeRun& run : runs) {
    if (run.call == call && !run.feeds.empty() &&
        !run.feeds[0].values.empty() && run.feeds[0].values[0] == first) {
      return &run;
    }
  }
  return nullptr;
}

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_FAKE_SESSION_H_
