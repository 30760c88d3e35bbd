#include "cc/runtime/scheduler.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tensorbow {
namespace runtime {
namespace {

// Timings are kept for the latest waves only, so a long run stays bounded.
constexpr size_t kMaxTimings = 1 << 14;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `replica_device` with -1 for the replicas whose device no stream group
// serves: they must still run somewhere.
std::vector<int> Served(const std::vector<int>& group_device,
                        std::vector<int> replica_device) {
  for (int& device : replica_device) {
    if (std::find(group_device.begin(), group_device.end(), device) ==
        group_device.end()) {
      device = -1;
    }
  }
  return replica_device;
}

}  // namespace

TaskScheduler::TaskScheduler(int num_stream_groups,
                             std::vector<int> group_device,
                             std::vector<int> replica_device)
    : num_stream_groups_(num_stream_groups < 1 ? 1 : num_stream_groups),
      group_device_(static_cast<int>(group_device.size()) ==
                            num_stream_groups_
                        ? std::move(group_device)
                        : std::vector<int>()),
      replica_device_(Served(group_device_, std::move(replica_device))) {
  for (int g = 1; g < num_stream_groups_; ++g) {
    threads_.emplace_back([this, g] { WorkerLoop(g); });
  }
}

TaskScheduler::~TaskScheduler() {
  // A wave submitted from another thread may still have tasks queued: let
  // it finish before the workers stop and the members go.
  std::lock_guard<std::mutex> wave_lock(wave_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

ChunkPool::ChunkPool(int64_t rows, std::vector<int64_t> batch_sizes)
    : rows_(rows), batch_sizes_(std::move(batch_sizes)) {
  for (size_t r = 0; r < batch_sizes_.size(); ++r) {
    free_.push_back(static_cast<int>(r));
  }
}

bool ChunkPool::Take(Chunk* chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_ >= rows_ || free_.empty()) return false;
  const int replica = free_.front();
  free_.pop_front();
  const int64_t size = std::max<int64_t>(batch_sizes_[replica], 1);
  *chunk = Chunk{replica, next_, std::min(rows_, next_ + size)};
  next_ = chunk->end;
  return true;
}

void ChunkPool::Give(int replica) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(replica);
}

void ChunkPool::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  next_ = rows_;
}

Status TaskScheduler::RunWave(const std::vector<Task>& tasks,
                              const Task& sync,
                              const std::vector<int64_t>& rows, int phase) {
  std::lock_guard<std::mutex> wave_lock(wave_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase == 0) ++wave_;
    phase_ = phase;
    rows_ = rows;
    rows_.resize(tasks.size(), -1);
  }
  Status status = Dispatch(tasks, /*record=*/true);
  if (!status.ok() || !sync) return status;
  const int64_t start = NowNs();
  Status s = sync(0);
  Record(/*replica=*/-1, /*stream_group=*/0, -1, start, NowNs());
  return s;
}

Status TaskScheduler::RunPool(int64_t rows,
                              const std::vector<int64_t>& batch_sizes,
                              const ChunkTask& task) {
  if (!group_device_.empty()) {
    return Status(kInvalidArgument,
                  "TensorBow: a pool run cannot place replicas on devices");
  }
  std::lock_guard<std::mutex> wave_lock(wave_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wave_;
    phase_ = 0;
    rows_.clear();
  }
  ChunkPool pool(rows, batch_sizes);
  // One loop per stream group: a loop that finds no free replica ends, as
  // the loops holding replicas go on while rows remain.
  std::vector<Task> loops(num_stream_groups_, [&](int stream_group) {
    Chunk chunk;
    while (pool.Take(&chunk)) {
      const int64_t start = NowNs();
      Status s = task(chunk, stream_group);
      Record(chunk.replica, stream_group, chunk.end - chunk.begin, start,
             NowNs());
      if (!s.ok()) {
        pool.Stop();
        return s;
      }
      pool.Give(chunk.replica);
    }
    return Status::Ok();
  });
  return Dispatch(loops, /*record=*/false);
}

Status TaskScheduler::Dispatch(const std::vector<Task>& tasks, bool record) {
  std::unique_lock<std::mutex> lock(mu_);
  record_ = record;
  statuses_.assign(tasks.size(), Status::Ok());
  remaining_ = 0;
  bool placed = false;
  for (size_t r = 0; r < tasks.size(); ++r) {
    if (!tasks[r]) continue;
    const int device =
        record && r < replica_device_.size() ? replica_device_[r] : -1;
    placed = placed || device >= 0;
    queue_.push_back(Pending{&tasks[r], static_cast<int>(r), device});
    ++remaining_;
  }
  if (placed) {
    // Only the groups of a task's device may take it.
    work_cv_.notify_all();
  } else {
    // Wake only as many workers as there are tasks beyond the caller's.
    const size_t others = remaining_ > 0 ? remaining_ - 1 : 0;
    for (size_t i = 0; i < others && i < threads_.size(); ++i) {
      work_cv_.notify_one();
    }
  }
  Drain(/*stream_group=*/0, lock);
  done_cv_.wait(lock, [this] { return remaining_ == 0; });
  for (const Status& s : statuses_) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

std::deque<TaskScheduler::Pending>::iterator TaskScheduler::NextFor(
    int stream_group) {
  if (group_device_.empty()) return queue_.begin();
  const int device = group_device_[stream_group];
  return std::find_if(queue_.begin(), queue_.end(), [device](const Pending& p) {
    return p.device < 0 || p.device == device;
  });
}

void TaskScheduler::Drain(int stream_group,
                          std::unique_lock<std::mutex>& lock) {
  while (true) {
    auto next = NextFor(stream_group);
    if (next == queue_.end()) return;
    Pending p = *next;
    queue_.erase(next);
    lock.unlock();
    const int64_t start = NowNs();
    Status s = (*p.task)(stream_group);
    const int64_t end = NowNs();
    lock.lock();
    statuses_[p.replica] = std::move(s);
    if (record_) {
      RecordLocked(p.replica, stream_group, RowsOf(p.replica), start, end);
    }
    if (--remaining_ == 0) done_cv_.notify_all();
  }
}

void TaskScheduler::WorkerLoop(int stream_group) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this, stream_group] {
      return stopping_ || NextFor(stream_group) != queue_.end();
    });
    if (stopping_) return;
    Drain(stream_group, lock);
  }
}

void TaskScheduler::Record(int replica, int stream_group, int64_t rows,
                           int64_t start, int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  RecordLocked(replica, stream_group, rows, start, end);
}

int64_t TaskScheduler::RowsOf(int replica) const {
  return replica >= 0 && static_cast<size_t>(replica) < rows_.size()
             ? rows_[replica]
             : -1;
}

void TaskScheduler::RecordLocked(int replica, int stream_group, int64_t rows,
                                 int64_t start, int64_t end) {
  if (timings_.size() >= kMaxTimings) timings_.clear();
  timings_.push_back(
      TaskTiming{wave_, replica, stream_group, rows, phase_, start, end});
}

std::vector<TaskTiming> TaskScheduler::Timings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timings_;
}

void TaskScheduler::ClearTimings() {
  std::lock_guard<std::mutex> lock(mu_);
  timings_.clear();
}

}  // namespace runtime
}  // namespace tensorbow
