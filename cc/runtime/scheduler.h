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

class TaskScheduler {
 public:
  using Task = std::function<Status(int stream_group)>;

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

  std::vector<TaskTiming> Timings() const;
  void ClearTimings();

 private:
  struct Pending {
    const Task* task;
    int replica;
    int device;  // -1: any stream group may run it
  };

  void WorkerLoop(int stream_group);
  // Pops and runs queued tasks of the current wave that `stream_group` may
  // run until none is left.
  void Drain(int stream_group, std::unique_lock<std::mutex>& lock);
  // The first queued task `stream_group` may run, or queue_.end().
  std::deque<Pending>::iterator NextFor(int stream_group);  // requires mu_
  void Record(int replica, int stream_group, int64_t start, int64_t end);
  void RecordLocked(int replica, int stream_group, int64_t start,
                    int64_t end);  // requires mu_
  std::vector<int64_t> rows_;  // of the current wave's tasks
  int phase_ = 0;  // of the current wave's tasks

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
