// How a wave's learning tasks are fed, run and collected: the runtime's
// orchestration, between the binding and the task scheduler.
//
// A WaveRunner makes one learning task per replica of a wave (in a pool
// run, one per chunk of the batch), feeds it its replica's feeds and, with
// calls per stream group, the replica's index; runs the tasks on the
// TaskScheduler's stream groups through a session; and hands back their
// fetches in replica order (a pool run's in row order). An atomic wave
// runs in two phases, Compute and Commit; between them the runner keeps
// what the commit is fed (wave.h). It owns what outlives a wave: the
// replicas' indices as fed, one allocation arena per stream group, and the
// tests' slow-downs (TENSORBOW_TEST_SLOW_REPLICA).
//
// Plain C++: no TensorFlow, no Python. WaveRunner is a template over the
// session that runs a task, the tensors it fetches and the arena it stages
// feeds in: the binding uses tf_adapter.h's TfSession, FetchedTensor and
// Arena, wave_runner_test.cc fakes of its own. Its methods return
// InvalidArgument, having run nothing, for arguments that do not fit; a
// wave that ran has its own status in its result. The binding turns the
// first into Python exceptions and hands the second on.
#ifndef TENSORBOW_CC_RUNTIME_WAVE_RUNNER_H_
#define TENSORBOW_CC_RUNTIME_WAVE_RUNNER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cc/runtime/host_tensor.h"
#include "cc/runtime/scheduler.h"
#include "cc/runtime/status.h"
#include "cc/runtime/wave.h"

namespace tensorbow {
namespace runtime {

// A replica's learning tasks delayed for tests, which need replicas of
// unequal speed on a machine whose stream groups are equally fast (the
// algorithms that adapt to them), or tasks finishing in another order (the
// waves whose result must not depend on it).
struct SlowDown {
  int replica;
  int phase;     // 0: a task's computation; 1: an atomic wave's commit
  double ms;
  bool per_row;  // `ms` per row of the task's batch

  // Milliseconds a task of `task_replica` in `task_phase` over `rows` rows
  // (-1: no batch feed, counted as one row) is delayed by this slow-down.
  double DelayMs(int task_replica, int task_phase, int64_t rows) const;
  // Sleeps for DelayMs.
  void Apply(int task_replica, int task_phase, int64_t rows) const;
};

// The slow-downs of `text`, a comma-separated list of
// "<replica>:<milliseconds>[/row][:<phase>]"; an item that does not parse,
// or whose delay is not positive, is skipped.
std::vector<SlowDown> ParseSlowDowns(const std::string& text);

// ParseSlowDowns of $TENSORBOW_TEST_SLOW_REPLICA; none if it is unset.
std::vector<SlowDown> SlowDownsFromEnvironment();

// InvalidArgument if TaskScheduler's placement (`group_device`, per stream
// group its device; `replica_device`, per replica its device; empty: none)
// leaves a replica's device without a stream group.
Status CheckPlacement(int num_stream_groups,
                      const std::vector<int>& group_device,
                      const std::vector<int>& replica_device);

// InvalidArgument unless `batch_feed` is -1 (none) or a position among
// `feeds` feeds.
Status CheckBatchFeed(int batch_feed, size_t feeds);

// Rows [chunk.begin, chunk.end) of `whole`, which has `rows` rows: a view
// of its buffer (or its strings, copied).
HostTensor RowsOf(const HostTensor& whole, int64_t rows, const Chunk& chunk);

// Per replica, the rows of its feed at `batch_feed` (-1 if none, or if it
// is a scalar): what its task's timing records.
std::vector<int64_t> BatchRows(
    const std::vector<std::vector<HostTensor>>& feeds, int batch_feed);

// A replica's index as fed to its tasks, aligned as TensorFlow wants its
// fed buffers, so that it is fed without a copy.
struct alignas(64) ReplicaId {
  int32_t value;
};

// An int32 scalar feed of `id`, borrowed.
HostTensor ReplicaIdFeed(const ReplicaId& id);

// How a wave's tasks run: replica 0 with `replica0` (a serialized
// RunOptions, may be empty) and, if `want_metadata`, its RunMetadata kept;
// the other replicas and the synchronisation with `others` (TensorFlow
// traces one run at a time).
struct WaveOptions {
  std::string replica0;
  std::string others;
  bool want_metadata = false;
};

// Runs `wait`, the scheduler's call that returns when a wave is done, on
// the thread that submitted the wave. The binding's waiter releases the
// GIL around it, so that Python threads run meanwhile.
using Waiter = std::function<Status(const std::function<Status()>& wait)>;

// Session: runs a learning task; thread-safe. As tf_adapter.h's TfSession:
//   Status Run(int call, const std::vector<HostTensor>& feeds,
//              const std::vector<const Tensor*>& kept,
//              const std::string& run_options, std::vector<Tensor>* outputs,
//              std::string* run_metadata, size_t internal,
//              Arena* arena) const;
// fed `feeds` then `kept`; the last `internal` outputs are left to be fed
// again. Tensor: as wave.h's KeptWave needs, and AllFinite(). Arena: a
// stream group's, made by Arena::New(name), released by Unref().
template <typename Session, typename Tensor, typename Arena>
class WaveRunner {
 public:
  using Feeds = std::vector<std::vector<HostTensor>>;  // per replica

  // What a wave hands back.
  struct WaveResult {
    // The wave's: its first failure by replica order, or the sync's.
    Status status;
    // Per replica, its fetches in its call's order; none unless `status`
    // is OK, and none for a replica not committed.
    std::vector<std::vector<Tensor>> outputs;
    std::string run_metadata;  // replica 0's, if wanted
    // Per replica, the positions among all its fetches of those holding
    // an infinity or a NaN: Compute's with check_finite, else none.
    std::vector<std::vector<int>> nonfinite;
  };

  // One chunk of a pool run and its fetches.
  struct ChunkResult {
    Chunk chunk;
    std::vector<Tensor> outputs;
  };

  struct PoolResult {
    Status status;                   // the first failure
    std::vector<ChunkResult> chunks;  // in row order; none unless OK
  };

  // Runs learning tasks on `session` (borrowed, it outlives this object)
  // for up to `num_replicas` replicas over `num_stream_groups` stream
  // groups, placed as TaskScheduler's `group_device` and `replica_device`
  // (which CheckPlacement accepts). `slow_downs` delay tasks (tests);
  // `waiter`, if set, runs the scheduler's blocking calls.
  WaveRunner(const Session* session, int num_stream_groups, int num_replicas,
             std::vector<int> group_device, std::vector<int> replica_device,
             std::vector<SlowDown> slow_downs, Waiter waiter = nullptr)
      : session_(session),
        slow_downs_(std::move(slow_downs)),
        waiter_(std::move(waiter)),
        scheduler_(num_stream_groups, std::move(group_device),
                   std::move(replica_device)),
        replica_ids_(num_replicas < 1 ? 1 : num_replicas) {
    for (size_t r = 0; r < replica_ids_.size(); ++r) {
      replica_ids_[r].value = static_cast<int32_t>(r);
    }
    for (int g = 0; g < scheduler_.num_stream_groups(); ++g) {
      arenas_.push_back(
          Arena::New("tensorbow_stream_group_" + std::to_string(g)));
    }
  }

  ~WaveRunner() {
    for (Arena* arena : arenas_) arena->Unref();
  }

  WaveRunner(const WaveRunner&) = delete;
  WaveRunner& operator=(const WaveRunner&) = delete;

  int num_stream_groups() const { return scheduler_.num_stream_groups(); }
  // Per stream group, where its tasks' staged feeds are allocated.
  const std::vector<Arena*>& arenas() const { return arenas_; }

  // The latest `last` task timings, or all of them if `last` is 0.
  std::vector<TaskTiming> Timings(size_t last) const {
    std::vector<TaskTiming> timings = scheduler_.Timings();
    if (last != 0 && last < timings.size()) {
      timings.erase(timings.begin(), timings.end() - last);
    }
    return timings;
  }
  void ClearTimings() { scheduler_.ClearTimings(); }

  // InvalidArgument unless `calls` fit a wave of `replicas` replicas: one
  // call per replica or, with `by_group`, per stream group, for at most
  // the runner's replicas.
  Status CheckCalls(const std::vector<int>& calls, bool by_group,
                    size_t replicas) const {
    if (calls.empty() || (!by_group && calls.size() != replicas)) {
      return Status(kInvalidArgument,
                    "TensorBow: one feed list per replica expected");
    }
    if (by_group && replicas > replica_ids_.size()) {
      return Status(kInvalidArgument,
                    "TensorBow: more replicas than the runtime has");
    }
    return Status::Ok();
  }

  // InvalidArgument unless a pool run of `feeds` feeds, given by lists of
  // `dtypes` dtypes and `split_flags` flags (one each per feed), has calls
  // and one batch size per replica, for at most the runner's replicas.
  Status CheckPool(const std::vector<int>& calls, size_t feeds, size_t dtypes,
                   size_t split_flags,
                   const std::vector<int64_t>& batch_sizes) const {
    if (calls.empty() || dtypes != feeds || split_flags != feeds) {
      return Status(kInvalidArgument,
                    "TensorBow: calls, and one dtype and split flag per "
                    "feed, expected");
    }
    if (batch_sizes.empty() || batch_sizes.size() > replica_ids_.size()) {
      return Status(kInvalidArgument,
                    "TensorBow: one batch size per replica expected");
    }
    return Status::Ok();
  }

  // Runs calls[r] with feeds[r] for every replica r as one wave, then
  // `sync_call` (if >= 0). With `by_group`, calls[g] is stream group g's
  // call, run for whichever replica g takes, fed its feeds and then its
  // replica index. Each task's timing records the rows of its feed at
  // `batch_feed` (if >= 0).
  Status RunWave(const std::vector<int>& calls, bool by_group, Feeds feeds,
                 int batch_feed, int sync_call, const WaveOptions& options,
                 WaveResult* result) {
    *result = WaveResult();
    Status refused = CheckFeeds(calls, by_group, feeds, batch_feed);
    if (!refused.ok()) return refused;
    const std::vector<int64_t> rows = BatchRows(feeds, batch_feed);
    if (by_group) AddReplicaIds(&feeds);
    RunTasks(calls, by_group, feeds, rows, nullptr, {}, sync_call, options,
             /*phase=*/0, /*internal=*/0, /*check_finite=*/false, result);
    return Status::Ok();
  }

  // A pool run (TaskScheduler::RunPool, Adaptive SGD's dynamic
  // scheduling): the rows of the feeds marked in `split` are cut into
  // chunks as replicas come free, batch_sizes[r] rows for replica r. A
  // chunk runs calls[g] of the stream group g that takes it, fed the
  // chunk's rows of the split feeds, the other feeds whole and its
  // replica's index, with `run_options`.
  Status RunPool(const std::vector<int>& calls,
                 const std::vector<HostTensor>& feeds,
                 const std::vector<bool>& split,
                 const std::vector<int64_t>& batch_sizes,
                 const std::string& run_options, PoolResult* result) {
    *result = PoolResult();
    // Each feed carries its dtype.
    Status refused = CheckPool(calls, feeds.size(), feeds.size(),
                               split.size(), batch_sizes);
    if (!refused.ok()) return refused;
    int64_t rows = -1;
    for (size_t i = 0; i < feeds.size(); ++i) {
      if (!split[i]) continue;
      const int64_t r = feeds[i].dims.empty() ? -1 : feeds[i].dims[0];
      if (r < 0 || (rows >= 0 && r != rows)) {
        return Status(kInvalidArgument,
                      "TensorBow: the split feeds must have rows, the same "
                      "number");
      }
      rows = r;
    }
    if (rows < 0) {
      return Status(kInvalidArgument, "TensorBow: no feed to split");
    }
    std::mutex mu;
    std::vector<ChunkResult> done;
    auto run_chunk = [&](const Chunk& chunk, int stream_group) {
      std::vector<HostTensor> fed;
      for (size_t i = 0; i < feeds.size(); ++i) {
        fed.push_back(split[i] ? RowsOf(feeds[i], rows, chunk) : feeds[i]);
      }
      fed.push_back(ReplicaIdFeed(replica_ids_[chunk.replica]));
      for (const SlowDown& d : slow_downs_) {
        d.Apply(chunk.replica, 0, chunk.end - chunk.begin);
      }
      ChunkResult chunk_result{chunk, {}};
      Status s = session_->Run(calls[stream_group % calls.size()], fed, {},
                               run_options, &chunk_result.outputs, nullptr,
                               0, arenas_[stream_group]);
      if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        done.push_back(std::move(chunk_result));
      }
      return s;
    };
    result->status =
        Wait([&] { return scheduler_.RunPool(rows, batch_sizes, run_chunk); });
    if (result->status.ok()) {
      std::sort(done.begin(), done.end(),
                [](const ChunkResult& a, const ChunkResult& b) {
                  return a.chunk.begin < b.chunk.begin;
                });
      result->chunks = std::move(done);
    }
    return Status::Ok();
  }

  // The first phase of an atomic wave: runs the tasks as RunWave does,
  // with no synchronisation, writing nothing. The last `internal` fetches
  // of each replica's call are kept for Commit instead of handed back, and
  // so are the feeds (still borrowed: the caller keeps their buffers alive
  // until Commit or Discard). With `check_finite`, also lists per replica
  // the positions of its fetches (kept ones included) holding a
  // non-finite value. Forgets what an earlier Compute kept, even if
  // refused.
  Status Compute(const std::vector<int>& calls, bool by_group, Feeds feeds,
                 int batch_feed, const WaveOptions& options, size_t internal,
                 bool check_finite, WaveResult* result) {
    *result = WaveResult();
    kept_.Discard();
    Status refused = CheckFeeds(calls, by_group, feeds, batch_feed);
    if (!refused.ok()) return refused;
    const std::vector<int64_t> rows = BatchRows(feeds, batch_feed);
    if (by_group) AddReplicaIds(&feeds);
    RunTasks(calls, by_group, feeds, rows, nullptr, {}, /*sync_call=*/-1,
             options, /*phase=*/0, internal, check_finite, result);
    if (result->status.ok()) {
      kept_.Keep(std::move(feeds), &result->outputs, internal);
    }
    return Status::Ok();
  }

  // The second phase: for every replica r with commit[r], runs calls[r]
  // (by_group: the call of the stream group that takes it) with Compute's
  // feeds for r and then the tensors Compute kept for r; then `sync_call`
  // (if >= 0). Refused unless a computed wave is kept; forgets it after.
  Status Commit(const std::vector<int>& calls, bool by_group,
                const std::vector<bool>& commit, int sync_call,
                const WaveOptions& options, WaveResult* result) {
    *result = WaveResult();
    Status refused = kept_.CheckCommit(commit.size(), by_group, calls.size());
    if (!refused.ok()) return refused;
    const Feeds feeds = kept_.TakeFeeds();
    const std::vector<std::vector<const Tensor*>> kept = kept_.Tensors();
    RunTasks(calls, by_group, feeds,
             std::vector<int64_t>(feeds.size(), -1), &kept, commit,
             sync_call, options, /*phase=*/1, /*internal=*/0,
             /*check_finite=*/false, result);
    kept_.Discard();
    return Status::Ok();
  }

  // Between the phases, synchronous SGD: wave.h's KeptWave::Average, Sums
  // and Replace of what Compute kept.
  Status AverageKept(const std::vector<double>& weights) {
    return kept_.Average(weights);
  }
  Status KeptSums(const std::vector<double>& weights,
                  std::vector<std::vector<double>>* sums) const {
    return kept_.Sums(weights, sums);
  }
  Status ReplaceKept(const std::vector<std::vector<double>>& values) {
    return kept_.Replace(values);
  }

  // Forgets what Compute kept: the wave is not committed.
  void Discard() { kept_.Discard(); }

 private:
  Status Wait(const std::function<Status()>& wait) {
    return waiter_ ? waiter_(wait) : wait();
  }

  Status CheckFeeds(const std::vector<int>& calls, bool by_group,
                    const Feeds& feeds, int batch_feed) const {
    Status s = CheckCalls(calls, by_group, feeds.size());
    for (size_t r = 0; s.ok() && r < feeds.size(); ++r) {
      s = CheckBatchFeed(batch_feed, feeds[r].size());
    }
    return s;
  }

  // Replica r's feeds end with its index; CheckCalls allows no more
  // replicas than the runner has.
  void AddReplicaIds(Feeds* feeds) const {
    for (size_t r = 0; r < feeds->size(); ++r) {
      (*feeds)[r].push_back(ReplicaIdFeed(replica_ids_[r]));
    }
  }

  // Runs calls[r] for every replica r (with commit[r], if commit is not
  // empty), fed feeds[r] and then (*kept)[r], on the scheduler, its
  // timing recording rows[r]; then `sync_call`. The last `internal`
  // fetches stay the session's. Sets result's status, outputs (only if
  // OK), run metadata and, with `check_finite`, nonfinite.
  void RunTasks(const std::vector<int>& calls, bool by_group,
                const Feeds& feeds, const std::vector<int64_t>& rows,
                const std::vector<std::vector<const Tensor*>>* kept,
                const std::vector<bool>& commit, int sync_call,
                const WaveOptions& options, int phase, size_t internal,
                bool check_finite, WaveResult* result) {
    const size_t n = feeds.size();
    const std::vector<const Tensor*> none;
    result->outputs.resize(n);
    result->nonfinite.resize(n);
    std::vector<TaskScheduler::Task> tasks(n);
    for (size_t r = 0; r < n; ++r) {
      if (!commit.empty() && !commit[r]) continue;
      tasks[r] = [&, r](int stream_group) {
        for (const SlowDown& d : slow_downs_) {
          d.Apply(static_cast<int>(r), phase, rows[r]);
        }
        std::vector<Tensor>& outputs = result->outputs[r];
        Status s = session_->Run(
            by_group ? calls[stream_group % calls.size()] : calls[r],
            feeds[r], kept != nullptr ? (*kept)[r] : none,
            r == 0 ? options.replica0 : options.others, &outputs,
            options.want_metadata && r == 0 ? &result->run_metadata
                                            : nullptr,
            internal, arenas_[stream_group]);
        if (s.ok() && check_finite) {
          for (size_t i = 0; i < outputs.size(); ++i) {
            if (!outputs[i].AllFinite()) {
              result->nonfinite[r].push_back(static_cast<int>(i));
            }
          }
        }
        return s;
      };
    }
    TaskScheduler::Task sync;
    if (sync_call >= 0) {
      sync = [&](int) {
        std::vector<Tensor> fetched;
        return session_->Run(sync_call, {}, {}, options.others, &fetched,
                             nullptr, 0, nullptr);
      };
    }
    result->status =
        Wait([&] { return scheduler_.RunWave(tasks, sync, rows, phase); });
    if (!result->status.ok()) result->outputs.clear();
  }

  const Session* const session_;
  const std::vector<SlowDown> slow_downs_;
  const Waiter waiter_;
  TaskScheduler scheduler_;
  // What a computed wave keeps for its commit.
  KeptWave<HostTensor, Tensor> kept_;
  // 0, 1, ..., L - 1: what replica r's tasks are fed as their index.
  std::vector<ReplicaId> replica_ids_;
  // Per stream group, where its tasks' staged feeds are allocated.
  std::vector<Arena*> arenas_;
};

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_WAVE_RUNNER_H_
