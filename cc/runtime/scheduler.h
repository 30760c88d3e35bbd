// A Crossbow-like task scheduler: a pool of stream groups (worker threads)
// that runs one wave of learning tasks concurrently, then returns. With
// several devices, each stream group serves one device and takes only the
// tasks of the replicas placed there.
//
// Plain C++: no TensorFlow, no Python. A learning task is a callable that
// is told which stream group runs it. The thread that submits a wave works
// as stream group 0 while it waits, so a wave costs one hand-off per extra
// stream group and none at all with one.
#ifndef TENSORBOW_CC_RUNTIME_SCHEDULER_H_
#define TENSORBOW_CC_RUNTIME_SCHEDULER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cc/runtime/status.h"

namespace tensorbow {
namespace runtime {

// When and where one task ran, in nanoseconds of a steady clock.
struct TaskTiming {
  int64_t wave;
  int replica;       // -1 for a synchronisation task
  int stream_group;  // which worker ran it
  int64_t rows;      // rows of the batch it was given, -1 if none
  int phase;         // 0: a task's computation, 1: its commit
  int64_t start_ns;
  int64_t end_ns;
};

// One chunk of a pool run: rows [begin, end) of the batch, for a replica.
struct Chunk {
  int replica;
  int64_t begin;
  int64_t end;
};

// Adaptive SGD's dynamic scheduling: the rows [0, rows) of a batch are cut
// into chunks as replicas come free, each taking its own batch size of rows
// (the last chunk may be shorter). The free replica that has waited longest
// takes the next chunk, so a slower replica makes fewer updates. Safe for
// concurrent use.
class ChunkPool {
 public:
  // `batch_sizes[r]` (>= 1): the rows replica r takes at a time.
  ChunkPool(int64_t rows, std::vector<int64_t> batch_sizes);

  // The next chunk, for the free replica that has waited longest; false
  // when every row is taken, no replica is free, or the pool was stopped.
  bool Take(Chunk* chunk);
  // The replica of a chunk taken is free again.
  void Give(int replica);
  // No chunk is handed out after this.
  void Stop();

 private:
  std::mutex mu_;
  const int64_t rows_;
  const std::vector<int64_t> batch_sizes_;
  int64_t next_ = 0;  // the first row not taken
  std::deque<int> free_;  // replicas free, longest waiting first
};

class TaskScheduler {
 public:
  using Task = std::function<Status(int stream_group)>;
  using ChunkTask = std::function<Status(const Chunk& chunk,
                                         int stream_group)>;

  // Starts `num_stream_groups - 1` worker threads (the caller is group 0).
  // With `group_device` (per stream group, its device) and `replica_device`
  // (per replica, its device), replica r's tasks run only on the groups of
  // its device; a replica beyond the map, or whose device no group serves,
  // runs on any group.
  explicit TaskScheduler(int num_stream_groups,
                         std::vector<int> group_device = {},
                         std::vector<int> replica_device = {});
  // Waits for a wave in flight on another thread, then stops the workers.
  ~TaskScheduler();

  TaskScheduler(const TaskScheduler&) = delete;
  TaskScheduler& operator=(const TaskScheduler&) = delete;

  int num_stream_groups() const { return num_stream_groups_; }

  // Runs tasks[r] for replica r, concurrently over the stream groups, and
  // returns when every one has finished (the wave's barrier); then runs
  // `sync` on the calling thread if every task succeeded and `sync` is set.
  // Returns the first failure, by replica order, or the sync's status.
  // Waves are serialised: a second caller waits for the first wave.
  // `rows[r]`, if given, is recorded with task r's timing. A null task is
  // skipped. Phase 1 (a commit) continues the wave of the last phase 0.
  Status RunWave(const std::vector<Task>& tasks, const Task& sync,
                 const std::vector<int64_t>& rows = {}, int phase = 0);

  // A pool run: every stream group takes chunks from a ChunkPool over
  // `rows` rows with `batch_sizes` (one per replica) and runs `task` on
  // each until none is left, as one wave. Each chunk's timing is recorded
  // as its replica's, with the chunk's rows. After a failure no chunk is
  // started; returns the first failure. Refused with device placement.
  Status RunPool(int64_t rows, const std::vector<int64_t>& batch_sizes,
                 const ChunkTask& task);

  std::vector<TaskTiming> Timings() const;
  void ClearTimings();

 private:
  struct Pending {
    const Task* task;
    int replica;
    int device;  // -1: any stream group may run it
  };

  // Queues `tasks` (indexed as statuses_), runs them over the stream
  // groups and waits for them; requires wave_mu_. With `record`, each
  // task's timing is recorded as replica r's.
  Status Dispatch(const std::vector<Task>& tasks, bool record);
  void WorkerLoop(int stream_group);
  // Pops and runs queued tasks of the current wave that `stream_group` may
  // run until none is left.
  void Drain(int stream_group, std::unique_lock<std::mutex>& lock);
  // The first queued task `stream_group` may run, or queue_.end().
  std::deque<Pending>::iterator NextFor(int stream_group);  // requires mu_
  void Record(int replica, int stream_group, int64_t rows, int64_t start,
              int64_t end);
  void RecordLocked(int replica, int stream_group, int64_t rows,
                    int64_t start, int64_t end);  // requires mu_
  int64_t RowsOf(int replica) const;  // requires mu_
  std::vector<int64_t> rows_;  // of the current wave's tasks
  int phase_ = 0;  // of the current wave's tasks
  bool record_ = true;  // whether Drain records each task's timing

  const int num_stream_groups_;
  const std::vector<int> group_device_;    // empty: no placement
  const std::vector<int> replica_device_;  // -1 where any group may run it
  std::mutex wave_mu_;  // one wave at a time

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Pending> queue_;
  std::vector<Status> statuses_;
  int remaining_ = 0;
  int64_t wave_ = 0;
  bool stopping_ = false;
  std::vector<TaskTiming> timings_;
  std::vector<std::thread> threads_;
};

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_SCHEDULER_H_
