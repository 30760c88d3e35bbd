// Tests of how a wave's learning tasks are fed, run and collected (bazel
// test //:wave_runner_test), through fake_session.h's session, which
// records what each task was fed, without TensorFlow.
//
// Checks as cc/runtime/check.h makes them.
#include "cc/runtime/wave_runner.h"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cc/runtime/check.h"
#include "cc/runtime/fake_session.h"

namespace tensorbow {
namespace runtime {
namespace {

using Runner = WaveRunner<FakeSession, FakeTensor, FakeArena>;
using Values = std::vector<float>;

// With calls per stream group, each replica's task is fed its own feeds
// and then its index, and runs the call of the stream group that took it,
// in that group's arena; replica 0 runs with the first options and gives
// the run metadata; each timing records the rows of the batch feed; the
// outputs come back in replica order.
void TestWaveFeedsEachReplicaItsFeedsAndIndex() {
  FakeSession session;
  Runner runner(&session, 2, 3, {}, {}, {});
  std::vector<Values> x = {{1}, {11, 12}, {21, 22, 23}};  // r + 1 rows
  std::vector<Values> w = {{0.5f}, {1.5f}, {2.5f}};
  Runner::Feeds feeds(3);
  for (int r = 0; r < 3; ++r) {
    feeds[r] = {FloatFeed(&x[r], {r + 1}), FloatFeed(&w[r], {1})};
  }
  Runner::WaveResult result;
  EXPECT(runner.RunWave({7, 8}, /*by_group=*/true, feeds, /*batch_feed=*/0,
                        /*sync_call=*/-1, {"first", "others", true}, &result)
             .ok());
  EXPECT(result.status.ok());
  const std::vector<FakeRun> runs = session.runs();
  EXPECT(runs.size() == 3);
  std::vector<int> seen(3, 0);
  for (const FakeRun& run : runs) {
    EXPECT(run.feeds.size() == 3);
    const int r = run.replica();
    EXPECT(r >= 0 && r < 3);
    if (r < 0 || r >= 3) continue;
    ++seen[r];
    EXPECT(run.feeds[0].values == Doubles(x[r]));
    EXPECT(run.feeds[0].dims == std::vector<int64_t>({r + 1}));
    EXPECT(run.feeds[1].values == Doubles(w[r]));
    EXPECT(run.feeds[2].dtype == kTfInt32 && run.feeds[2].dims.empty());
    EXPECT(run.stream_group() == 0 || run.stream_group() == 1);
    EXPECT(run.call == 7 + run.stream_group());
    EXPECT(run.options == (r == 0 ? "first" : "others"));
    EXPECT(run.wants_metadata == (r == 0));
    EXPECT(run.kept.empty() && run.internal == 0);
  }
  EXPECT(seen == std::vector<int>({1, 1, 1}));
  EXPECT(result.outputs.size() == 3);
  for (int r = 0; r < 3 && result.outputs.size() == 3; ++r) {
    EXPECT(result.outputs[r].size() == 2);
    EXPECT(result.outputs[r][1].Values() == x[r]);
  }
  const FakeRun* first = Find(runs, 7, 1);
  if (first == nullptr) first = Find(runs, 8, 1);
  EXPECT(first != nullptr);
  if (first != nullptr) {
    EXPECT(result.run_metadata ==
           "metadata of call " + std::to_string(first->call));
  }
  const std::vector<TaskTiming> timings = runner.Timings(0);
  EXPECT(timings.size() == 3);
  for (const TaskTiming& t : timings) {
    EXPECT(t.rows == t.replica + 1 && t.phase == 0);
  }
}

// With a call per replica, replica r runs calls[r] fed its feeds alone;
// the sync call runs after every task, fed nothing, with the others'
// options.
void TestWaveRunsTheSyncAfterEveryReplica() {
  FakeSession session;
  Runner runner(&session, 2, 3, {}, {}, {});
  std::vector<Values> x = {{100}, {200}, {300}};
  Runner::Feeds feeds(3);
  for (int r = 0; r < 3; ++r) feeds[r] = {FloatFeed(&x[r], {})};
  Runner::WaveResult result;
  EXPECT(runner.RunWave({4, 5, 6}, false, feeds, -1, 9,
                        {"first", "others", false}, &result)
             .ok());
  EXPECT(result.status.ok());
  const std::vector<FakeRun> runs = session.runs();
  EXPECT(runs.size() == 4);
  for (int r = 0; r < 3; ++r) {
    const FakeRun* run = Find(runs, 4 + r, 100 * (r + 1));
    EXPECT(run != nullptr);
    if (run == nullptr) continue;
    EXPECT(run->feeds.size() == 1);
    EXPECT(run->order < 3);
    EXPECT(!run->wants_metadata);
  }
  if (runs.size() == 4) {
    const FakeRun& sync = runs[3];
    EXPECT(sync.call == 9 && sync.feeds.empty() && sync.kept.empty());
    EXPECT(sync.options == "others" && sync.arena.empty());
  }
  EXPECT(result.outputs.size() == 3);
  for (int r = 0; r < 3 && result.outputs.size() == 3; ++r) {
    EXPECT(result.outputs[r][0].Values() == Values({4.0f + r}));
  }
  EXPECT(result.run_metadata.empty());
  // The timings: no batch feed, then the sync as replica -1.
  const std::vector<TaskTiming> timings = runner.Timings(0);
  EXPECT(timings.size() == 4);
  for (size_t i = 0; i + 1 < timings.size(); ++i) {
    EXPECT(timings[i].rows == -1 && timings[i].replica >= 0);
  }
  const std::vector<TaskTiming> last = runner.Timings(1);
  EXPECT(last.size() == 1 && last[0].replica == -1);
  EXPECT(runner.Timings(2).size() == 2 && runner.Timings(10).size() == 4);
  runner.ClearTimings();
  EXPECT(runner.Timings(0).empty());
}

// A failing task's status is the wave's (the first by replica order if
// several fail); no outputs come back and the sync does not run.
void TestAFailingTaskFailsTheWave() {
  FakeSession session([](const FakeRun& run, std::vector<FakeTensor>* out) {
    out->emplace_back(Values{1});
    if (run.call == 5) return Status(kInternal, "replica 1 failed");
    if (run.call == 6) return Status(kInvalidArgument, "replica 2 failed");
    return Status::Ok();
  });
  Runner runner(&session, 2, 3, {}, {}, {});
  std::vector<Values> x = {{1}, {2}, {3}};
  Runner::Feeds feeds(3);
  for (int r = 0; r < 3; ++r) feeds[r] = {FloatFeed(&x[r], {1})};
  Runner::WaveResult result;
  // Refused is only for arguments: the wave ran.
  EXPECT(runner.RunWave({4, 5, 6}, false, feeds, 0, 9, {}, &result).ok());
  EXPECT(result.status.code() == kInternal);
  EXPECT(result.status.message() == "replica 1 failed");
  EXPECT(result.outputs.empty());
  const std::vector<FakeRun> runs = session.runs();
  EXPECT(runs.size() == 3);
  for (const FakeRun& run : runs) EXPECT(run.call != 9);
}

// Arguments that do not fit are refused before any task runs.
void TestWaveRefusals() {
  const char* kPerReplica = "TensorBow: one feed list per replica expected";
  FakeSession session;
  Runner runner(&session, 2, 3, {}, {}, {});
  std::vector<Values> x = {{1}, {2}, {3}, {4}};
  auto feeds_of = [&](int n) {
    Runner::Feeds feeds(n);
    for (int r = 0; r < n; ++r) feeds[r] = {FloatFeed(&x[r], {1})};
    return feeds;
  };
  Runner::WaveResult result;
  Status s = runner.RunWave({}, true, feeds_of(2), 0, -1, {}, &result);
  EXPECT(s.code() == kInvalidArgument && s.message() == kPerReplica);
  s = runner.RunWave({1, 2}, false, feeds_of(3), 0, -1, {}, &result);
  EXPECT(s.code() == kInvalidArgument && s.message() == kPerReplica);
  s = runner.RunWave({1}, true, feeds_of(4), 0, -1, {}, &result);
  EXPECT(s.code() == kInvalidArgument &&
         s.message() == "TensorBow: more replicas than the runtime has");
  s = runner.RunWave({1}, true, feeds_of(3), 1, -1, {}, &result);
  EXPECT(s.code() == kInvalidArgument &&
         s.message() == "TensorBow: batch_feed is not a feed position");
  EXPECT(runner.CheckCalls({1}, true, 3).ok());
  EXPECT(runner.CheckCalls({1, 2, 3}, false, 3).ok());
  EXPECT(CheckBatchFeed(-1, 0).ok() && CheckBatchFeed(1, 2).ok());
  EXPECT(!CheckBatchFeed(2, 2).ok());
  s = runner.Compute({1}, true, feeds_of(4), 0, {}, 0, false, &result);
  EXPECT(s.message() == "TensorBow: more replicas than the runtime has");
  EXPECT(session.runs().empty());
}

// A pool run cuts the rows into chunks that cover them once, in order,
// each of its replica's batch size (the last may be shorter); a chunk is
// fed its rows of the split feeds (strings too), the other feeds whole
// and its replica's index, runs its stream group's call, and its outputs
// come back with it.
void TestPoolChunksCoverEveryRowOnce() {
  FakeSession session;
  Runner runner(&session, 2, 2, {}, {}, {});
  Values x(20);
  for (int i = 0; i < 20; ++i) x[i] = static_cast<float>(i);  // 10 x 2
  Values w = {0.5f, 1.5f};
  HostTensor labels;
  labels.dtype = kTfString;
  labels.dims = {10};
  for (int i = 0; i < 10; ++i) labels.strings.push_back("s" + std::to_string(i));
  const std::vector<HostTensor> feeds = {FloatFeed(&x, {10, 2}), labels,
                                         FloatFeed(&w, {2})};
  Runner::PoolResult result;
  EXPECT(runner.RunPool({20, 21}, feeds, {true, true, false}, {3, 2},
                        "pool", &result)
             .ok());
  EXPECT(result.status.ok());
  const std::vector<int64_t> batch_sizes = {3, 2};
  int64_t next = 0;
  for (const Runner::ChunkResult& c : result.chunks) {
    EXPECT(c.chunk.begin == next);
    EXPECT(c.chunk.replica == 0 || c.chunk.replica == 1);
    const int64_t size = c.chunk.end - c.chunk.begin;
    EXPECT(size == batch_sizes[c.chunk.replica] ||
           (c.chunk.end == 10 && size > 0 &&
            size < batch_sizes[c.chunk.replica]));
    next = c.chunk.end;
    const Values rows(x.begin() + 2 * c.chunk.begin,
                      x.begin() + 2 * c.chunk.end);
    EXPECT(c.outputs.size() == 2 && c.outputs[1].Values() == rows);
  }
  EXPECT(next == 10);
  const std::vector<FakeRun> runs = session.runs();
  EXPECT(runs.size() == result.chunks.size());
  for (const FakeRun& run : runs) {
    EXPECT(run.feeds.size() == 4);
    if (run.feeds.size() != 4) continue;
    const int64_t begin = static_cast<int64_t>(run.feeds[0].values[0]) / 2;
    const Runner::ChunkResult* chunk = nullptr;
    for (const Runner::ChunkResult& c : result.chunks) {
      if (c.chunk.begin == begin) chunk = &c;
    }
    EXPECT(chunk != nullptr);
    if (chunk == nullptr) continue;
    const int64_t end = chunk->chunk.end;
    EXPECT(run.feeds[0].dims == std::vector<int64_t>({end - begin, 2}));
    EXPECT(run.feeds[0].values ==
           Doubles(Values(x.begin() + 2 * begin, x.begin() + 2 * end)));
    EXPECT(run.feeds[1].dims == std::vector<int64_t>({end - begin}));
    EXPECT(run.feeds[1].strings ==
           std::vector<std::string>(labels.strings.begin() + begin,
                                    labels.strings.begin() + end));
    EXPECT(run.feeds[2].values == Doubles(w));
    EXPECT(run.replica() == chunk->chunk.replica);
    EXPECT(run.call == 20 + run.stream_group());
    EXPECT(run.options == "pool" && !run.wants_metadata);
  }
  // Each chunk's timing is its replica's, with its rows.
  const std::vector<TaskTiming> timings = runner.Timings(0);
  EXPECT(timings.size() == result.chunks.size());
  int64_t timed_rows = 0;
  for (const TaskTiming& t : timings) timed_rows += t.rows;
  EXPECT(timed_rows == 10);
}

void TestPoolRefusalsAndFailure() {
  const char* kPerFeed =
      "TensorBow: calls, and one dtype and split flag per feed, expected";
  const char* kRows =
      "TensorBow: the split feeds must have rows, the same number";
  FakeSession session;
  Runner runner(&session, 2, 2, {}, {}, {});
  Values x(10, 1.0f), y(8, 1.0f), s(1, 1.0f);
  const HostTensor x10 = FloatFeed(&x, {10}), y8 = FloatFeed(&y, {8}),
                   scalar = FloatFeed(&s, {});
  Runner::PoolResult result;
  auto refused = [&](const std::vector<int>& calls,
                     const std::vector<HostTensor>& feeds,
                     const std::vector<bool>& split,
                     const std::vector<int64_t>& batch_sizes) {
    const Status st =
        runner.RunPool(calls, feeds, split, batch_sizes, "", &result);
    EXPECT(st.code() == kInvalidArgument);
    return st.message();
  };
  EXPECT(refused({}, {x10}, {true}, {2}) == kPerFeed);
  EXPECT(refused({1}, {x10}, {true, false}, {2}) == kPerFeed);
  EXPECT(runner.CheckPool({1}, 1, 2, 1, {2}).message() == kPerFeed);
  EXPECT(refused({1}, {x10}, {true}, {}) ==
         "TensorBow: one batch size per replica expected");
  EXPECT(refused({1}, {x10}, {true}, {2, 2, 2}) ==
         "TensorBow: one batch size per replica expected");
  EXPECT(refused({1}, {x10, y8}, {true, true}, {2}) == kRows);
  EXPECT(refused({1}, {scalar}, {true}, {2}) == kRows);
  EXPECT(refused({1}, {x10}, {false}, {2}) == "TensorBow: no feed to split");
  EXPECT(session.runs().empty());

  FakeSession failing([](const FakeRun& run, std::vector<FakeTensor>* out) {
    out->emplace_back(Values{1});
    return run.feeds[0].dims[0] == 2 ? Status::Ok()
                                     : Status(kInternal, "a short chunk");
  });
  Runner pool(&failing, 1, 2, {}, {}, {});
  EXPECT(pool.RunPool({1}, {x10}, {true}, {2, 3}, "", &result).ok());
  EXPECT(result.status.code() == kInternal);
  EXPECT(result.status.message() == "a short chunk");
  EXPECT(result.chunks.empty());
}

// The outputs of the two phases: a replica's computation fetches
// [its value, 100 + its value] (the second kept); its commit fetches
// [1000 + what it was fed back]; a sync, nothing.
Status ComputeThenCommit(const FakeRun& run, std::vector<FakeTensor>* out) {
  if (run.feeds.empty()) return Status::Ok();
  const float value = static_cast<float>(run.feeds[0].values[0]);
  if (run.kept.empty()) {
    out->emplace_back(Values{value});
    out->emplace_back(Values{100 + value});
  } else {
    out->emplace_back(Values{1000 + run.kept[0][0]});
  }
  return Status::Ok();
}

// Compute keeps the last `internal` fetches of each replica; Commit feeds
// each replica with commit[r] its computed feeds and then what was kept
// for it, runs the sync, and forgets the wave.
void TestCommitFeedsWhatComputeKept() {
  FakeSession session(ComputeThenCommit);
  Runner runner(&session, 2, 2, {}, {}, {});
  std::vector<Values> x = {{1}, {2}};
  Runner::Feeds feeds = {{FloatFeed(&x[0], {1})}, {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {"first", "others", false},
                        /*internal=*/1, /*check_finite=*/false, &result)
             .ok());
  EXPECT(result.status.ok());
  EXPECT(result.outputs.size() == 2);
  for (int r = 0; r < 2 && result.outputs.size() == 2; ++r) {
    EXPECT(result.outputs[r].size() == 1);
    EXPECT(result.outputs[r][0].Values() == x[r]);
  }
  EXPECT(result.nonfinite ==
         std::vector<std::vector<int>>({std::vector<int>(),
                                        std::vector<int>()}));
  for (const FakeRun& run : session.runs()) EXPECT(run.internal == 1);

  EXPECT(runner.Commit({3, 4}, false, {false, true}, 9,
                       {"first", "others", false}, &result)
             .ok());
  EXPECT(result.status.ok());
  EXPECT(result.outputs.size() == 2);
  if (result.outputs.size() == 2) {
    EXPECT(result.outputs[0].empty());
    EXPECT(result.outputs[1].size() == 1 &&
           result.outputs[1][0].Values() == Values({1102}));
  }
  const std::vector<FakeRun> runs = session.runs();
  EXPECT(runs.size() == 4);
  EXPECT(Find(runs, 3, 1) == nullptr);
  const FakeRun* commit = Find(runs, 4, 2);
  EXPECT(commit != nullptr);
  if (commit != nullptr) {
    EXPECT(commit->feeds.size() == 1);
    EXPECT(commit->kept == std::vector<Values>({{102}}));
    EXPECT(commit->options == "others" && commit->internal == 0);
  }
  EXPECT(runs.size() == 4 && runs[3].call == 9);
  const std::vector<TaskTiming> last = runner.Timings(2);
  EXPECT(last.size() == 2 && last[0].replica == 1 && last[0].phase == 1);
  // The wave is forgotten.
  const Status again = runner.Commit({3, 4}, false, {true, true}, -1, {},
                                     &result);
  EXPECT(again.code() == kInvalidArgument &&
         again.message() == "TensorBow: Commit needs a computed wave");
}

// With calls per stream group the commit is fed the replica's index
// again, after its feeds and before what was kept.
void TestCommitByGroupFeedsTheIndexAgain() {
  FakeSession session(ComputeThenCommit);
  Runner runner(&session, 1, 2, {}, {}, {});
  std::vector<Values> x = {{1}, {2}};
  Runner::Feeds feeds = {{FloatFeed(&x[0], {1})}, {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  EXPECT(runner.Compute({1}, true, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(runner.Commit({3}, true, {true, true}, -1, {}, &result).ok());
  EXPECT(result.status.ok());
  const std::vector<FakeRun> runs = session.runs();
  for (int r = 0; r < 2; ++r) {
    const FakeRun* commit = Find(runs, 3, x[r][0]);
    EXPECT(commit != nullptr);
    if (commit == nullptr) continue;
    EXPECT(commit->feeds.size() == 2 && commit->replica() == r);
    EXPECT(commit->kept == std::vector<Values>({{100 + x[r][0]}}));
  }
}

// Commit needs a computed wave: none yet, one discarded, one whose
// computation failed, or one forgotten by a Compute refused.
void TestCommitWithoutComputeIsRefused() {
  const char* kNeeds = "TensorBow: Commit needs a computed wave";
  bool fail = false;
  FakeSession session([&fail](const FakeRun& run,
                              std::vector<FakeTensor>* out) {
    if (fail) return Status(kInternal, "failed");
    return ComputeThenCommit(run, out);
  });
  Runner runner(&session, 1, 2, {}, {}, {});
  std::vector<Values> x = {{1}, {2}};
  const Runner::Feeds feeds = {{FloatFeed(&x[0], {1})},
                               {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  Status s = runner.Commit({3, 4}, false, {true, true}, -1, {}, &result);
  EXPECT(s.code() == kInvalidArgument && s.message() == kNeeds);
  EXPECT(session.runs().empty());

  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  // A commit that does not fit is refused, keeping the wave.
  EXPECT(runner.Commit({3}, false, {true, true}, -1, {}, &result).message() ==
         kNeeds);
  EXPECT(runner.Commit({3, 4}, false, {true}, -1, {}, &result).message() ==
         kNeeds);
  // By stream group, a commit needs a call to give the groups.
  EXPECT(runner.Commit({}, true, {true, true}, -1, {}, &result).message() ==
         kNeeds);
  runner.Discard();
  EXPECT(runner.Commit({3, 4}, false, {true, true}, -1, {}, &result)
             .message() == kNeeds);

  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(!runner.Compute({1}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(runner.Commit({3, 4}, false, {true, true}, -1, {}, &result)
             .message() == kNeeds);

  fail = true;
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(result.status.message() == "failed" && result.outputs.empty());
  EXPECT(runner.Commit({3, 4}, false, {true, true}, -1, {}, &result)
             .message() == kNeeds);
}

// check_finite lists, per replica, the positions of its fetches (kept
// ones included) holding an infinity or a NaN.
void TestComputeListsNonfiniteFetches() {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  FakeSession session([&](const FakeRun& run, std::vector<FakeTensor>* out) {
    if (run.feeds[0].values[0] == 0) {
      *out = {FakeTensor(Values{1, 2}), FakeTensor(Values{3, kNan}),
              FakeTensor(Values{4}), FakeTensor(Values{-kInf})};
    } else {
      *out = {FakeTensor(Values{1}), FakeTensor(Values{2}),
              FakeTensor(Values{3}), FakeTensor(Values{4})};
    }
    return Status::Ok();
  });
  Runner runner(&session, 2, 2, {}, {}, {});
  std::vector<Values> x = {{0}, {1}};
  const Runner::Feeds feeds = {{FloatFeed(&x[0], {1})},
                               {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, true, &result).ok());
  EXPECT(result.nonfinite ==
         std::vector<std::vector<int>>({{1, 3}, std::vector<int>()}));
  EXPECT(result.outputs.size() == 2 && result.outputs[0].size() == 3);
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(result.nonfinite ==
         std::vector<std::vector<int>>({std::vector<int>(),
                                        std::vector<int>()}));
}

// Synchronous SGD between the phases: the commit is fed the mean of what
// the replicas kept, or the values replacing it.
void TestCommitIsFedTheAveragedKeptTensors() {
  FakeSession session(ComputeThenCommit);
  Runner runner(&session, 2, 2, {}, {}, {});
  std::vector<Values> x = {{1}, {3}};
  const Runner::Feeds feeds = {{FloatFeed(&x[0], {1})},
                               {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  std::vector<std::vector<double>> sums;
  EXPECT(runner.KeptSums({1.0, 1.0}, &sums).ok());
  EXPECT(sums == std::vector<std::vector<double>>({{204.0}}));
  EXPECT(runner.AverageKept({0.25, 0.75}).ok());
  EXPECT(runner.Commit({3, 4}, false, {true, true}, -1, {}, &result).ok());
  EXPECT(result.outputs.size() == 2);
  for (int r = 0; r < 2 && result.outputs.size() == 2; ++r) {
    EXPECT(result.outputs[r][0].Values() == Values({1102.5f}));
  }
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(runner.ReplaceKept({{7.0}}).ok());
  EXPECT(runner.Commit({3, 4}, false, {true, false}, -1, {}, &result).ok());
  EXPECT(result.outputs[0][0].Values() == Values({1007}));
  EXPECT(runner.AverageKept({0.5, 0.5}).message() ==
         "TensorBow: AverageKept needs a computed wave");
}

void TestParseSlowDowns() {
  std::vector<SlowDown> d = ParseSlowDowns("0:5");
  EXPECT(d.size() == 1);
  if (d.size() == 1) {
    EXPECT(d[0].replica == 0 && d[0].ms == 5.0 && d[0].phase == 0 &&
           !d[0].per_row);
  }
  d = ParseSlowDowns("1:2/row:1");
  EXPECT(d.size() == 1);
  if (d.size() == 1) {
    EXPECT(d[0].replica == 1 && d[0].ms == 2.0 && d[0].phase == 1 &&
           d[0].per_row);
  }
  d = ParseSlowDowns("garbage,2:3,x:1,3:0,4:-2,,5:1.5/row,6:4:1");
  EXPECT(d.size() == 3);
  if (d.size() == 3) {
    EXPECT(d[0].replica == 2 && d[0].ms == 3.0 && !d[0].per_row);
    EXPECT(d[1].replica == 5 && d[1].ms == 1.5 && d[1].per_row &&
           d[1].phase == 0);
    EXPECT(d[2].replica == 6 && d[2].ms == 4.0 && d[2].phase == 1);
  }
  EXPECT(ParseSlowDowns("").empty());
  EXPECT(ParseSlowDowns("slow").empty());

  setenv("TENSORBOW_TEST_SLOW_REPLICA", "0:5,1:2/row:1", 1);
  EXPECT(SlowDownsFromEnvironment().size() == 2);
  unsetenv("TENSORBOW_TEST_SLOW_REPLICA");
  EXPECT(SlowDownsFromEnvironment().empty());
}

// A slow-down delays its replica's tasks of its phase, by its time or by
// its time per row (a task without a batch feed counting one).
void TestSlowDownDelays() {
  const SlowDown fixed{0, 1, 5.0, false};
  EXPECT(fixed.DelayMs(0, 1, 100) == 5.0);
  EXPECT(fixed.DelayMs(0, 0, 100) == 0.0);
  EXPECT(fixed.DelayMs(1, 1, 100) == 0.0);
  const SlowDown per_row{1, 0, 2.0, true};
  EXPECT(per_row.DelayMs(1, 0, 10) == 20.0);
  EXPECT(per_row.DelayMs(1, 0, -1) == 2.0);
  EXPECT(per_row.DelayMs(1, 0, 0) == 2.0);
  EXPECT(per_row.DelayMs(0, 0, 10) == 0.0);
}

double Milliseconds(const TaskTiming& t) {
  return (t.end_ns - t.start_ns) * 1e-6;
}

// The runner applies the slow-downs to the tasks they name: replica 1's
// computation by 4 ms per row of its batch (10 rows), replica 0's commit
// by 30 ms.
void TestSlowDownsDelayTheTasksTheyName() {
  FakeSession session(ComputeThenCommit);
  Runner runner(&session, 2, 2, {}, {},
                {{1, 0, 4.0, true}, {0, 1, 30.0, false}});
  std::vector<Values> x = {Values(10, 1.0f), Values(10, 2.0f)};
  const Runner::Feeds feeds = {{FloatFeed(&x[0], {10})},
                               {FloatFeed(&x[1], {10})}};
  Runner::WaveResult result;
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(runner.Commit({3, 4}, false, {true, true}, -1, {}, &result).ok());
  const std::vector<TaskTiming> timings = runner.Timings(0);
  EXPECT(timings.size() == 4);
  for (const TaskTiming& t : timings) {
    if (t.replica == 1 && t.phase == 0) EXPECT(Milliseconds(t) >= 40.0);
    if (t.replica == 0 && t.phase == 1) EXPECT(Milliseconds(t) >= 30.0);
  }
}

void TestCheckPlacement() {
  EXPECT(CheckPlacement(2, {}, {}).ok());
  EXPECT(CheckPlacement(2, {0}, {}).ok());
  EXPECT(CheckPlacement(2, {0, 1}, {1, 0, 1}).ok());
  Status s = CheckPlacement(2, {0}, {0, 0});
  EXPECT(s.code() == kInvalidArgument &&
         s.message() == "TensorBow: one device per stream group expected");
  s = CheckPlacement(2, {0, 1}, {0, 2, 1});
  EXPECT(s.code() == kInvalidArgument &&
         s.message() == "TensorBow: device 2 of a replica has no stream group");
}

// One arena per stream group, named after it, released with the runner.
void TestOneArenaPerStreamGroup() {
  FakeSession session;
  const int before = FakeArena::Alive();
  {
    Runner runner(&session, 3, 2, {}, {}, {});
    EXPECT(runner.num_stream_groups() == 3);
    EXPECT(FakeArena::Alive() == before + 3);
    EXPECT(runner.arenas().size() == 3);
    for (size_t g = 0; g < runner.arenas().size(); ++g) {
      EXPECT(runner.arenas()[g]->name() ==
             "tensorbow_stream_group_" + std::to_string(g));
    }
  }
  EXPECT(FakeArena::Alive() == before);
  Runner one(&session, 0, 0, {}, {}, {});
  EXPECT(one.num_stream_groups() == 1 && one.arenas().size() == 1);
}

// A chunk's rows: a view into the buffer, or the strings copied.
void TestRowsOf() {
  Values x(10);  // 5 x 2
  HostTensor whole = FloatFeed(&x, {5, 2});
  const HostTensor part = RowsOf(whole, 5, Chunk{0, 1, 3});
  EXPECT(part.dims == std::vector<int64_t>({2, 2}));
  EXPECT(part.data == x.data() + 2);
  EXPECT(part.nbytes == 4 * sizeof(float));
  HostTensor words;
  words.dtype = kTfString;
  words.dims = {4, 2};
  words.strings = {"a", "b", "c", "d", "e", "f", "g", "h"};
  const HostTensor some = RowsOf(words, 4, Chunk{1, 1, 3});
  EXPECT(some.dims == std::vector<int64_t>({2, 2}));
  EXPECT(some.strings == std::vector<std::string>({"c", "d", "e", "f"}));
}

// The waiter runs the scheduler's blocking calls (the binding releases
// the GIL there): every task runs inside it; a refusal never gets there.
void TestTasksRunInsideTheWaiter() {
  bool waiting = false;
  int waits = 0;
  int outside = 0;
  FakeSession session([&](const FakeRun& run, std::vector<FakeTensor>* out) {
    if (!waiting) ++outside;
    return ComputeThenCommit(run, out);
  });
  Runner runner(&session, 1, 2, {}, {}, {},
                [&](const std::function<Status()>& wait) {
                  ++waits;
                  waiting = true;
                  const Status s = wait();
                  waiting = false;
                  return s;
                });
  std::vector<Values> x = {{1}, {2}};
  const Runner::Feeds feeds = {{FloatFeed(&x[0], {1})},
                               {FloatFeed(&x[1], {1})}};
  Runner::WaveResult result;
  EXPECT(runner.RunWave({1, 2}, false, feeds, 0, 5, {}, &result).ok());
  EXPECT(runner.Compute({1, 2}, false, feeds, 0, {}, 1, false, &result).ok());
  EXPECT(runner.Commit({3, 4}, false, {true, true}, 5, {}, &result).ok());
  Runner::PoolResult pool;
  EXPECT(runner.RunPool({1}, {feeds[0][0]}, {true}, {1, 1}, "", &pool).ok());
  EXPECT(!runner.RunWave({}, false, feeds, 0, -1, {}, &result).ok());
  EXPECT(waits == 4);
  EXPECT(outside == 0);
  // RunWave 2 + sync, Compute 2, Commit 2 + sync, one chunk.
  EXPECT(session.runs().size() == 3 + 2 + 3 + 1);
}

}  // namespace
}  // namespace runtime
}  // namespace tensorbow

int main() {
  using namespace tensorbow::runtime;  // NOLINT(build/namespaces)
  TestWaveFeedsEachReplicaItsFeedsAndIndex();
  TestWaveRunsTheSyncAfterEveryReplica();
  TestAFailingTaskFailsTheWave();
  TestWaveRefusals();
  TestPoolChunksCoverEveryRowOnce();
  TestPoolRefusalsAndFailure();
  TestCommitFeedsWhatComputeKept();
  TestCommitByGroupFeedsTheIndexAgain();
  TestCommitWithoutComputeIsRefused();
  TestComputeListsNonfiniteFetches();
  TestCommitIsFedTheAveragedKeptTensors();
  TestParseSlowDowns();
  TestSlowDownDelays();
  TestSlowDownsDelayTheTasksTheyName();
  TestCheckPlacement();
  TestOneArenaPerStreamGroup();
  TestRowsOf();
  TestTasksRunInsideTheWaiter();
  return Failed("wave_runner_test");
}
