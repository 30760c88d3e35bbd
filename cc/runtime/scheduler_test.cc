// Tests of the TensorFlow-free task scheduler (bazel test //:scheduler_test).
//
// Checks as cc/runtime/check.h makes them.
#include "cc/runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cc/runtime/check.h"

namespace tensorbow {
namespace runtime {
namespace {

void SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Every task of a wave runs once, on a valid stream group, and the wave
// returns only when all have finished.
void TestWaveRunsEveryTaskOnce() {
  TaskScheduler scheduler(3);
  EXPECT(scheduler.num_stream_groups() == 3);
  constexpr int kTasks = 8;
  std::vector<std::atomic<int>> runs(kTasks);
  std::atomic<int> finished{0};
  std::vector<int> groups(kTasks, -1);
  std::vector<TaskScheduler::Task> tasks;
  for (int r = 0; r < kTasks; ++r) {
    tasks.push_back([&, r](int group) {
      SleepMs(r % 3);
      ++runs[r];
      groups[r] = group;
      ++finished;
      return Status::Ok();
    });
  }
  for (int wave = 1; wave <= 3; ++wave) {
    Status s = scheduler.RunWave(tasks, nullptr);
    EXPECT(s.ok());
    EXPECT(finished.load() == wave * kTasks);
    for (int r = 0; r < kTasks; ++r) {
      EXPECT(runs[r].load() == wave);
      EXPECT(groups[r] >= 0 && groups[r] < 3);
    }
  }
}

// The barrier: the sync task runs after every task of the wave has
// finished, on the caller's thread, and not at all if a task failed.
void TestBarrierBeforeSync() {
  TaskScheduler scheduler(2);
  std::atomic<int> finished{0};
  std::vector<TaskScheduler::Task> tasks;
  for (int r = 0; r < 5; ++r) {
    tasks.push_back([&, r](int) {
      SleepMs(2 * r);
      ++finished;
      return Status::Ok();
    });
  }
  int seen_by_sync = -1;
  const std::thread::id caller = std::this_thread::get_id();
  bool sync_on_caller = false;
  TaskScheduler::Task sync = [&](int group) {
    seen_by_sync = finished.load();
    sync_on_caller = std::this_thread::get_id() == caller && group == 0;
    return Status::Ok();
  };
  EXPECT(scheduler.RunWave(tasks, sync).ok());
  EXPECT(seen_by_sync == 5);
  EXPECT(sync_on_caller);

  tasks[3] = [](int) { return Status(kInternal, "replica 3 failed"); };
  seen_by_sync = -1;
  Status s = scheduler.RunWave(tasks, sync);
  EXPECT(s.code() == kInternal);
  EXPECT(seen_by_sync == -1);

  // A failing sync is the wave's status.
  tasks[3] = [](int) { return Status::Ok(); };
  s = scheduler.RunWave(tasks, [](int) {
    return Status(kFailedPrecondition, "sync failed");
  });
  EXPECT(s.code() == kFailedPrecondition && s.message() == "sync failed");
}

// With several failures the wave reports the first by replica order, not
// the first to happen; every other task still runs.
void TestFirstFailureByReplicaOrder() {
  TaskScheduler scheduler(2);
  std::atomic<int> ran{0};
  std::vector<TaskScheduler::Task> tasks(6);
  for (int r = 0; r < 6; ++r) {
    tasks[r] = [&](int) {
      ++ran;
      return Status::Ok();
    };
  }
  tasks[1] = [&](int) {
    SleepMs(30);  // fails last
    ++ran;
    return Status(kInvalidArgument, "replica 1");
  };
  tasks[4] = [&](int) {
    ++ran;
    return Status(kInternal, "replica 4");
  };
  Status s = scheduler.RunWave(tasks, nullptr);
  EXPECT(s.code() == kInvalidArgument);
  EXPECT(s.message() == "replica 1");
  EXPECT(ran.load() == 6);
  // The next wave starts clean.
  tasks[1] = tasks[0];
  tasks[4] = tasks[0];
  EXPECT(scheduler.RunWave(tasks, nullptr).ok());
}

// Timings: one per task (replica, rows, group, phase, wave) and one per
// sync (replica -1); a commit phase continues its wave; null tasks are
// skipped; clearing empties them.
void TestTimings() {
  TaskScheduler scheduler(2);
  std::vector<TaskScheduler::Task> tasks(3, [](int) {
    SleepMs(1);
    return Status::Ok();
  });
  tasks[1] = nullptr;
  auto sync = [](int) { return Status::Ok(); };
  EXPECT(scheduler.RunWave(tasks, sync, {10, 20, 30}, 0).ok());
  EXPECT(scheduler.RunWave(tasks, nullptr, {10, 20, 30}, 1).ok());
  EXPECT(scheduler.RunWave(tasks, nullptr, {}, 0).ok());
  std::vector<TaskTiming> timings = scheduler.Timings();
  EXPECT(timings.size() == 7);  // 2 + sync, 2 commits, 2
  std::multiset<std::string> seen;
  for (const TaskTiming& t : timings) {
    EXPECT(t.start_ns <= t.end_ns);
    EXPECT(t.stream_group >= 0 && t.stream_group < 2);
    EXPECT(t.replica != 1);
    seen.insert(std::to_string(t.wave) + "/" + std::to_string(t.phase) +
                "/" + std::to_string(t.replica) + "/" +
                std::to_string(t.rows));
  }
  const std::multiset<std::string> want = {
      "1/0/0/10", "1/0/2/30", "1/0/-1/-1", "1/1/0/10",
      "1/1/2/30", "2/0/0/-1", "2/0/2/-1"};
  EXPECT(seen == want);
  for (const TaskTiming& sync_timing : timings) {
    if (sync_timing.replica != -1) continue;
    for (const TaskTiming& t : timings) {
      if (t.wave == 1 && t.phase == 0 && t.replica >= 0) {
        EXPECT(sync_timing.start_ns >= t.end_ns);
      }
    }
  }
  scheduler.ClearTimings();
  EXPECT(scheduler.Timings().empty());
}

// Shutting down while another thread's wave still has tasks queued: the
// destructor waits for that wave, and every queued task runs.
void TestShutdownWithTasksQueued() {
  auto* scheduler = new TaskScheduler(2);
  constexpr int kTasks = 6;
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::vector<TaskScheduler::Task> tasks(kTasks, [&](int) {
    ++started;
    SleepMs(20);
    ++finished;
    return Status::Ok();
  });
  Status wave_status(kInternal, "wave not run");
  std::thread submitter(
      [&] { wave_status = scheduler->RunWave(tasks, nullptr); });
  while (started.load() == 0) SleepMs(1);
  delete scheduler;  // tasks are still queued here
  EXPECT(finished.load() == kTasks);
  submitter.join();
  EXPECT(wave_status.ok());
}

// At least one stream group, whatever is asked; one group runs the wave on
// the caller's thread alone.
void TestOneStreamGroup() {
  TaskScheduler scheduler(0);
  EXPECT(scheduler.num_stream_groups() == 1);
  const std::thread::id caller = std::this_thread::get_id();
  int on_caller = 0;
  std::vector<TaskScheduler::Task> tasks(4, [&](int group) {
    if (std::this_thread::get_id() == caller && group == 0) ++on_caller;
    return Status::Ok();
  });
  EXPECT(scheduler.RunWave(tasks, nullptr).ok());
  EXPECT(on_caller == 4);
}

// Placed on devices: four groups serve devices 0, 0, 1, 1, and each
// replica's task runs only on a group of its device, however long the other
// device's tasks take; a replica whose device no group serves still runs.
void TestTasksRunOnTheirDevicesGroups() {
  const std::vector<int> group_device = {0, 0, 1, 1};
  const std::vector<int> replica_device = {1, 1, 1, 0, 0, 0, 2};
  TaskScheduler scheduler(4, group_device, replica_device);
  const int n = static_cast<int>(replica_device.size());
  std::vector<int> groups(n, -1);
  std::vector<TaskScheduler::Task> tasks;
  for (int r = 0; r < n; ++r) {
    tasks.push_back([&, r](int group) {
      // Device 1's tasks are slow: a free group of device 0 must still
      // leave them alone.
      SleepMs(replica_device[r] == 1 ? 5 : 0);
      groups[r] = group;
      return Status::Ok();
    });
  }
  std::set<int> used;
  for (int wave = 0; wave < 20; ++wave) {
    EXPECT(scheduler.RunWave(tasks, nullptr).ok());
    for (int r = 0; r < n; ++r) {
      EXPECT(groups[r] >= 0 && groups[r] < 4);
      if (replica_device[r] < 2) {
        EXPECT(group_device[groups[r]] == replica_device[r]);
      }
      used.insert(groups[r]);
      groups[r] = -1;
    }
  }
  EXPECT(used.size() >= 2);
}

// A pool run hands every row out once, in order, each chunk the batch size
// of the replica that took it (the last one maybe shorter), and a slower
// replica takes fewer chunks.
void TestPoolCutsTheRowsAsReplicasComeFree() {
  TaskScheduler scheduler(2);
  std::mutex mu;
  std::vector<Chunk> chunks;
  std::vector<int> taken(2, 0);
  Status s = scheduler.RunPool(
      203, {10, 5}, [&](const Chunk& chunk, int group) {
        EXPECT(group >= 0 && group < 2);
        SleepMs(chunk.replica == 1 ? 12 : 2);
        std::lock_guard<std::mutex> lock(mu);
        chunks.push_back(chunk);
        ++taken[chunk.replica];
        return Status::Ok();
      });
  EXPECT(s.ok());
  std::sort(chunks.begin(), chunks.end(),
            [](const Chunk& a, const Chunk& b) { return a.begin < b.begin; });
  int64_t next = 0;
  for (const Chunk& c : chunks) {
    EXPECT(c.begin == next);
    const int64_t size = c.replica == 0 ? 10 : 5;
    EXPECT(c.end - c.begin == size || (c.end == 203 && c.end - c.begin < size));
    next = c.end;
  }
  EXPECT(next == 203);
  EXPECT(taken[0] > 2 * taken[1]);
  // Each chunk's timing is its replica's, with its rows.
  std::vector<TaskTiming> timings = scheduler.Timings();
  EXPECT(timings.size() == chunks.size());
  int64_t rows = 0;
  for (const TaskTiming& t : timings) {
    EXPECT(t.replica == 0 || t.replica == 1);
    rows += t.rows;
  }
  EXPECT(rows == 203);
}

// More replicas than stream groups: the free replica that has waited
// longest goes next, so equally fast replicas take turns.
void TestPoolTakesTurnsOverMoreReplicas() {
  TaskScheduler scheduler(2);
  std::mutex mu;
  std::vector<int> taken(4, 0);
  Status s = scheduler.RunPool(
      400, {10, 10, 10, 10}, [&](const Chunk& chunk, int) {
        SleepMs(1);
        std::lock_guard<std::mutex> lock(mu);
        ++taken[chunk.replica];
        return Status::Ok();
      });
  EXPECT(s.ok());
  for (int r = 0; r < 4; ++r) EXPECT(taken[r] >= 8 && taken[r] <= 12);
  // One replica, one stream group: it takes every chunk.
  TaskScheduler single(1);
  int chunks = 0;
  s = single.RunPool(25, {10}, [&](const Chunk& chunk, int group) {
    EXPECT(chunk.replica == 0 && group == 0);
    ++chunks;
    return Status::Ok();
  });
  EXPECT(s.ok() && chunks == 3);
}

// After a failure no chunk starts, and the failure is returned.
void TestPoolStopsAtAFailure() {
  TaskScheduler scheduler(2);
  std::atomic<int> started{0};
  Status s = scheduler.RunPool(1000, {10, 10}, [&](const Chunk& chunk, int) {
    ++started;
    if (chunk.begin == 20) return Status(kInvalidArgument, "bad chunk");
    return Status::Ok();
  });
  EXPECT(!s.ok() && s.message() == "bad chunk");
  EXPECT(started.load() < 10);
  // Placement is refused.
  TaskScheduler placed(2, {0, 1}, {0, 1});
  s = placed.RunPool(10, {5, 5}, [](const Chunk&, int) {
    return Status::Ok();
  });
  EXPECT(!s.ok());
}

}  // namespace
}  // namespace runtime
}  // namespace tensorbow

int main() {
  using namespace tensorbow::runtime;  // NOLINT(build/namespaces)
  TestWaveRunsEveryTaskOnce();
  TestBarrierBeforeSync();
  TestFirstFailureByReplicaOrder();
  TestTimings();
  TestShutdownWithTasksQueued();
  TestOneStreamGroup();
  TestTasksRunOnTheirDevicesGroups();
  TestPoolCutsTheRowsAsReplicasComeFree();
  TestPoolTakesTurnsOverMoreReplicas();
  TestPoolStopsAtAFailure();
  return Failed("scheduler_test");
}
