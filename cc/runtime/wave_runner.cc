// The parts of wave_runner.h that are not templates: the tests'
// slow-downs, the checks of a placement and a batch feed, and the feeds a
// task is given beside its replica's own.
#include "cc/runtime/wave_runner.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tensorbow {
namespace runtime {

double SlowDown::DelayMs(int task_replica, int task_phase,
                         int64_t rows) const {
  if (task_replica != replica || task_phase != phase) return 0.0;
  return per_row ? ms * (rows > 0 ? rows : 1) : ms;
}

void SlowDown::Apply(int task_replica, int task_phase, int64_t rows) const {
  const double total = DelayMs(task_replica, task_phase, rows);
  if (total <= 0.0) return;
  std::this_thread::sleep_for(
      std::chrono::microseconds(static_cast<int64_t>(total * 1000)));
}

std::vector<SlowDown> ParseSlowDowns(const std::string& text) {
  std::vector<SlowDown> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    SlowDown d{-1, 0, 0.0, false};
    int consumed = 0;
    if (std::sscanf(item.c_str(), "%d:%lf%n", &d.replica, &d.ms,
                    &consumed) == 2 && d.ms > 0) {
      const char* rest = item.c_str() + consumed;
      if (std::strncmp(rest, "/row", 4) == 0) {
        d.per_row = true;
        rest += 4;
      }
      if (*rest == ':') d.phase = std::atoi(rest + 1);
      out.push_back(d);
    }
    start = end + 1;
  }
  return out;
}

std::vector<SlowDown> SlowDownsFromEnvironment() {
  const char* text = std::getenv("TENSORBOW_TEST_SLOW_REPLICA");
  return text != nullptr ? ParseSlowDowns(text) : std::vector<SlowDown>();
}

Status CheckPlacement(int num_stream_groups,
                      const std::vector<int>& group_device,
                      const std::vector<int>& replica_device) {
  if (replica_device.empty()) return Status::Ok();
  if (static_cast<int>(group_device.size()) != num_stream_groups) {
    return Status(kInvalidArgument,
                  "TensorBow: one device per stream group expected");
  }
  for (int device : replica_device) {
    if (std::find(group_device.begin(), group_device.end(), device) ==
        group_device.end()) {
      return Status(kInvalidArgument,
                    "TensorBow: device " + std::to_string(device) +
                        " of a replica has no stream group");
    }
  }
  return Status::Ok();
}

Status CheckBatchFeed(int batch_feed, size_t feeds) {
  if (batch_feed >= static_cast<int>(feeds)) {
    return Status(kInvalidArgument,
                  "TensorBow: batch_feed is not a feed position");
  }
  return Status::Ok();
}

HostTensor RowsOf(const HostTensor& whole, int64_t rows, const Chunk& chunk) {
  HostTensor part;
  part.dtype = whole.dtype;
  part.dims = whole.dims;
  part.dims[0] = chunk.end - chunk.begin;
  if (whole.dtype == kTfString) {
    const size_t per_row = rows > 0 ? whole.strings.size() / rows : 0;
    part.strings.assign(whole.strings.begin() + chunk.begin * per_row,
                        whole.strings.begin() + chunk.end * per_row);
    return part;
  }
  const size_t row_bytes = rows > 0 ? whole.nbytes / rows : 0;
  part.data = static_cast<char*>(whole.data) + chunk.begin * row_bytes;
  part.nbytes = (chunk.end - chunk.begin) * row_bytes;
  return part;
}

std::vector<int64_t> BatchRows(
    const std::vector<std::vector<HostTensor>>& feeds, int batch_feed) {
  std::vector<int64_t> rows(feeds.size(), -1);
  for (size_t r = 0; r < feeds.size(); ++r) {
    if (batch_feed >= 0 && !feeds[r][batch_feed].dims.empty()) {
      rows[r] = feeds[r][batch_feed].dims[0];
    }
  }
  return rows;
}

HostTensor ReplicaIdFeed(const ReplicaId& id) {
  HostTensor feed;
  feed.dtype = kTfInt32;
  feed.data = const_cast<int32_t*>(&id.value);
  feed.nbytes = sizeof(int32_t);
  return feed;
}

}  // namespace runtime
}  // namespace tensorbow
