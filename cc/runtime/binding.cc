// Python binding of the runtime (module tensorbow._runtime).
//
// The only file that knows pybind11 and NumPy: it turns TensorFlow's Python
// handles (TF_Session, TF_Operation) into pointers, NumPy arrays into
// HostTensors and fetched tensors back into arrays without copying them,
// and releases the GIL for the whole of a wave.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "cc/runtime/scheduler.h"
#include "cc/runtime/tf_adapter.h"
#include "cc/runtime/wave.h"

// TensorFlow's Python module wraps TF_Session and TF_Operation with its own
// pybind11, whose "conduit" hands out the raw pointer when asked with the
// right type: std::type_info is compared by mangled name, so these
// definitions, local to this file, name the same types as TF's C API.
struct TF_Session {};
struct TF_Operation {};

namespace py = pybind11;

namespace tensorbow {
namespace runtime {
namespace {

constexpr int kTfString = 7;  // TF_STRING

// The raw C pointer behind one of TensorFlow's pybind11 handles, asked of
// its conduit under each platform ABI id in turn (TensorFlow's pybind11 was
// built by another compiler, so its id differs from ours).
template <typename T>
void* PointerFromConduit(py::handle obj, const std::vector<std::string>& abi_ids,
                         const char* what) {
  if (!py::hasattr(obj, "_pybind11_conduit_v1_")) {
    throw py::type_error(std::string("TensorBow: expected TensorFlow's ") +
                         what + " handle, got " +
                         py::str(py::type::of(obj)).cast<std::string>());
  }
  py::capsule type_info(
      static_cast<void*>(const_cast<std::type_info*>(&typeid(T))),
      typeid(std::type_info).name());
  for (const std::string& abi : abi_ids) {
    py::object cap = obj.attr("_pybind11_conduit_v1_")(
        py::bytes(abi), type_info, py::bytes("raw_pointer_ephemeral"));
    if (!cap.is_none()) {
      return PyCapsule_GetPointer(cap.ptr(), PyCapsule_GetName(cap.ptr()));
    }
  }
  throw py::type_error(std::string("TensorBow: cannot read the ") + what +
                       " pointer from TensorFlow's Python handle; this "
                       "TensorFlow build is not supported (pybind11 ABI)");
}

constexpr int kTfBfloat16 = 14;  // TF_BFLOAT16

// TF_DataTypes a training run can fetch (strings besides): NumpyDtype's.
const std::vector<int>& FetchableDtypes() {
  static const std::vector<int> dtypes = {1, 2, 3, 4, 5, 6, 8, 9, 10,
                                          kTfBfloat16, 17, 18, 19, 22, 23};
  return dtypes;
}

py::dtype NumpyDtype(int tf_dtype) {
  switch (tf_dtype) {
    case kTfBfloat16:
      // TensorFlow's own NumPy type for bfloat16.
      return py::dtype::from_args(
          py::module_::import("ml_dtypes").attr("bfloat16"));
    case 1: return py::dtype::of<float>();
    case 2: return py::dtype::of<double>();
    case 3: return py::dtype::of<int32_t>();
    case 4: return py::dtype::of<uint8_t>();
    case 5: return py::dtype::of<int16_t>();
    case 6: return py::dtype::of<int8_t>();
    case 8: return py::dtype("complex64");
    case 9: return py::dtype::of<int64_t>();
    case 10: return py::dtype::of<bool>();
    case 17: return py::dtype::of<uint16_t>();
    case 18: return py::dtype("complex128");
    case 19: return py::dtype("float16");
    case 22: return py::dtype::of<uint32_t>();
    case 23: return py::dtype::of<uint64_t>();
    default:
      throw py::type_error("TensorBow: cannot fetch a tensor of TF_DataType " +
                           std::to_string(tf_dtype) + " in a training run");
  }
}

// Borrows `array`'s memory; the caller keeps `array` alive for the run.
HostTensor ToHostTensor(const py::array& array, int tf_dtype) {
  HostTensor host;
  host.dtype = tf_dtype;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) {
    host.dims.push_back(array.shape(i));
  }
  if (tf_dtype == kTfString) {
    for (py::handle item : array.attr("ravel")()) {
      if (py::isinstance<py::bytes>(item)) {
        host.strings.push_back(item.cast<std::string>());
      } else {
        host.strings.push_back(py::str(item).cast<std::string>());
      }
    }
    return host;
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error("TensorBow: feeds must be C-contiguous");
  }
  host.data = const_cast<void*>(array.data());
  host.nbytes = static_cast<size_t>(array.nbytes());
  return host;
}

// Wraps a fetched tensor as a NumPy array that owns it (no copy).
py::object ToNumpy(FetchedTensor& t) {
  std::vector<py::ssize_t> shape;
  for (int64_t d : t.dims()) shape.push_back(static_cast<py::ssize_t>(d));
  if (t.dtype() == kTfString) {
    py::list items;
    for (const std::string& s : t.strings()) items.append(py::bytes(s));
    return py::module_::import("numpy")
        .attr("array")(items, py::arg("dtype") = "O")
        .attr("reshape")(py::tuple(py::cast(shape)));
  }
  py::dtype dtype = NumpyDtype(t.dtype());
  void* data = t.data();
  void* owned = t.Release();
  py::capsule owner(owned, [](void* p) { FetchedTensor::Delete(p); });
  return py::array(dtype, shape, {}, data, owner);
}

std::vector<Endpoint> ToEndpoints(const py::list& items,
                                  const std::vector<std::string>& abi_ids) {
  std::vector<Endpoint> out;
  for (py::handle item : items) {
    auto pair = item.cast<py::tuple>();
    out.push_back(Endpoint{
        PointerFromConduit<TF_Operation>(pair[0], abi_ids, "TF_Operation"),
        pair[1].cast<int>()});
  }
  return out;
}

constexpr int kTfInt32 = 3;  // TF_INT32

// The runtime's errors as Python's: ValueError for a bad argument.
void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  if (status.code() == kInvalidArgument) {
    throw py::value_error(status.message());
  }
  throw std::runtime_error(status.message());
}

// A replica's index as fed to its tasks, aligned as TensorFlow wants its
// fed buffers, so that it is fed without a copy.
struct alignas(64) ReplicaId {
  int32_t value;
};

// Rows [chunk.begin, chunk.end) of `whole`, which has `rows` rows: a view
// of its buffer (or its strings, copied).
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

// One wave's feeds, as HostTensors borrowed from NumPy arrays that the
// caller keeps alive, and its outputs. With `replica_ids`, replica r's
// feeds end with the scalar replica_ids[r] (borrowed too).
struct Wave {
  Wave(const py::list& feeds, const std::vector<int>& dtypes, int batch_feed,
       const ReplicaId* replica_ids)
      : n(py::len(feeds)), host(n), rows(n, -1), outputs(n) {
    if (batch_feed >= static_cast<int>(dtypes.size())) {
      throw py::value_error("TensorBow: batch_feed is not a feed position");
    }
    for (size_t r = 0; r < n; ++r) {
      py::list replica_feeds = feeds[r].cast<py::list>();
      if (py::len(replica_feeds) != dtypes.size()) {
        throw py::value_error("TensorBow: feeds and dtypes differ in length");
      }
      for (size_t i = 0; i < dtypes.size(); ++i) {
        host[r].push_back(
            ToHostTensor(replica_feeds[i].cast<py::array>(), dtypes[i]));
      }
      if (batch_feed >= 0 && !host[r][batch_feed].dims.empty()) {
        rows[r] = host[r][batch_feed].dims[0];
      }
      if (replica_ids != nullptr) {
        HostTensor id;
        id.dtype = kTfInt32;
        id.data = const_cast<int32_t*>(&replica_ids[r].value);
        id.nbytes = sizeof(int32_t);
        host[r].push_back(std::move(id));
      }
    }
  }

  // A wave over feeds converted before (an atomic wave's commit).
  explicit Wave(std::vector<std::vector<HostTensor>> converted)
      : n(converted.size()), host(std::move(converted)), rows(n, -1),
        outputs(n) {}

  // (code, message, outputs, run_metadata); outputs only on success.
  py::tuple Result(const Status& status) {
    py::list result;
    if (status.ok()) {
      for (auto& replica : outputs) {
        py::list values;
        for (auto& t : replica) values.append(ToNumpy(t));
        result.append(values);
      }
    }
    return py::make_tuple(status.code(), status.message(), result,
                          py::bytes(metadata));
  }

  const size_t n;
  std::vector<std::vector<HostTensor>> host;
  std::vector<int64_t> rows;
  std::vector<std::vector<FetchedTensor>> outputs;
  std::string metadata;
};

// A replica's tasks delayed for tests (TENSORBOW_TEST_SLOW_REPLICA).
struct SlowDown {
  int replica;
  int phase;
  double ms;
  bool per_row;

  // Sleeps if a task of `replica` in `phase` over `rows` rows is delayed.
  void Apply(int task_replica, int task_phase, int64_t rows) const {
    if (task_replica != replica || task_phase != phase) return;
    const double total = per_row ? ms * (rows > 0 ? rows : 1) : ms;
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<int64_t>(total * 1000)));
  }
};

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

class Runtime {
 public:
  // `group_device` and `replica_device`: as TaskScheduler's placement
  // (empty: none); every device of a replica must have a stream group.
  Runtime(py::handle session, int num_stream_groups, int num_replicas,
          std::vector<std::string> abi_ids, std::vector<int> group_device,
          std::vector<int> replica_device)
      : abi_ids_(std::move(abi_ids)),
        session_(PointerFromConduit<TF_Session>(session, abi_ids_,
                                                "TF_Session")),
        // Copies: the arguments may be made before CheckedGroups runs.
        scheduler_(CheckedGroups(num_stream_groups, group_device,
                                 replica_device),
                   group_device, replica_device),
        replica_ids_(num_replicas < 1 ? 1 : num_replicas) {
    for (size_t r = 0; r < replica_ids_.size(); ++r) {
      replica_ids_[r].value = static_cast<int32_t>(r);
    }
    for (int g = 0; g < scheduler_.num_stream_groups(); ++g) {
      arenas_.push_back(
          Arena::New("tensorbow_stream_group_" + std::to_string(g)));
    }
    // For tests of algorithms that adapt to replicas of unequal speed on a
    // machine whose stream groups are equally fast, and of waves whose
    // result must not depend on the order tasks finish in:
    // TENSORBOW_TEST_SLOW_REPLICA, a comma-separated list of
    // "<replica>:<milliseconds>[/row][:<phase>]", delays that replica's
    // learning tasks of that phase (0, the default: their computation; 1:
    // an atomic wave's commit) by a fixed time, or by that time per row
    // of its batch.
    if (const char* slow = std::getenv("TENSORBOW_TEST_SLOW_REPLICA")) {
      slow_downs_ = ParseSlowDowns(slow);
    }
  }

  ~Runtime() {
    for (Arena* arena : arenas_) arena->Unref();
  }

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Per stream group, its arena's counters.
  py::list ArenaStatistics() const {
    py::list out;
    for (const Arena* arena : arenas_) {
      const ArenaStats s = arena->Stats();
      py::dict d;
      d["num_allocs"] = s.num_allocs;
      d["bytes_in_use"] = s.bytes_in_use;
      d["peak_bytes_in_use"] = s.peak_bytes_in_use;
      d["system_allocs"] = s.system_allocs;
      d["system_bytes"] = s.system_bytes;
      out.append(d);
    }
    return out;
  }

  int AddCall(const py::list& feeds, const py::list& fetches,
              const py::list& targets) {
    std::vector<void*> target_ops;
    for (py::handle op : targets) {
      target_ops.push_back(
          PointerFromConduit<TF_Operation>(op, abi_ids_, "TF_Operation"));
    }
    return session_.AddCall(ToEndpoints(feeds, abi_ids_),
                            ToEndpoints(fetches, abi_ids_), target_ops);
  }

  // Runs calls[r] with feeds[r] for every replica r as one wave, then
  // `sync_call` (if >= 0). With `by_group`, calls[g] is stream group g's
  // call, run for whichever replica g takes, fed its feeds and then its
  // replica index. Replica 0 runs with `run_options`, the others
  // and the sync with `other_options` (TensorFlow traces one run at a
  // time). Each task's timing records the rows of its feed at position
  // `batch_feed` (if >= 0), as handed to TensorFlow. Returns (code,
  // message, outputs, run_metadata): outputs[r] holds replica r's fetches;
  // run_metadata is replica 0's.
  py::tuple RunWave(const std::vector<int>& calls, bool by_group,
                    const py::list& feeds, const std::vector<int>& dtypes,
                    int batch_feed, int sync_call,
                    const py::bytes& run_options,
                    const py::bytes& other_options, bool want_metadata) {
    Wave wave = MakeWave(calls, by_group, feeds, dtypes, batch_feed);
    const Status status =
        RunTasks(calls, by_group, &wave, nullptr, {}, sync_call, run_options,
                 other_options, want_metadata, /*phase=*/0, 0, nullptr);
    return wave.Result(status);
  }

  // A pool run (TaskScheduler::RunPool, Adaptive SGD's dynamic
  // scheduling): the rows of the feeds marked in `split` are cut into
  // chunks as replicas come free, batch_sizes[r] rows for replica r. A
  // chunk runs calls[g] of the stream group g that takes it, fed the
  // chunk's rows of the split feeds, the other feeds whole and its
  // replica's index, with `options`. Returns (code, message, chunks):
  // per chunk in the order of its rows, (replica, begin, end, outputs).
  py::tuple RunPool(const std::vector<int>& calls, const py::list& feeds,
                    const std::vector<int>& dtypes,
                    const std::vector<bool>& split,
                    const std::vector<int64_t>& batch_sizes,
                    const py::bytes& options) {
    const size_t n = py::len(feeds);
    if (calls.empty() || dtypes.size() != n || split.size() != n) {
      throw py::value_error(
          "TensorBow: calls, and one dtype and split flag per feed, expected");
    }
    if (batch_sizes.empty() || batch_sizes.size() > replica_ids_.size()) {
      throw py::value_error("TensorBow: one batch size per replica expected");
    }
    std::vector<HostTensor> whole;
    int64_t rows = -1;
    for (size_t i = 0; i < n; ++i) {
      whole.push_back(ToHostTensor(feeds[i].cast<py::array>(), dtypes[i]));
      if (!split[i]) continue;
      const int64_t r = whole.back().dims.empty() ? -1 : whole.back().dims[0];
      if (r < 0 || (rows >= 0 && r != rows)) {
        throw py::value_error(
            "TensorBow: the split feeds must have rows, the same number");
      }
      rows = r;
    }
    if (rows < 0) throw py::value_error("TensorBow: no feed to split");
    struct Done {
      Chunk chunk;
      std::vector<FetchedTensor> outputs;
    };
    std::mutex mu;
    std::vector<Done> done;
    const std::string run_options = options;
    auto run_chunk = [&](const Chunk& chunk, int stream_group) {
      std::vector<HostTensor> fed;
      for (size_t i = 0; i < n; ++i) {
        fed.push_back(split[i] ? RowsOf(whole[i], rows, chunk) : whole[i]);
      }
      HostTensor id;
      id.dtype = kTfInt32;
      id.data = &replica_ids_[chunk.replica].value;
      id.nbytes = sizeof(int32_t);
      fed.push_back(std::move(id));
      for (const SlowDown& d : slow_downs_) {
        d.Apply(chunk.replica, 0, chunk.end - chunk.begin);
      }
      Done result{chunk, {}};
      Status s = session_.Run(calls[stream_group % calls.size()], fed, {},
                              run_options, &result.outputs, nullptr, 0,
                              arenas_[stream_group]);
      if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        done.push_back(std::move(result));
      }
      return s;
    };
    Status status;
    {
      py::gil_scoped_release release;
      status = scheduler_.RunPool(rows, batch_sizes, run_chunk);
    }
    py::list chunks;
    if (status.ok()) {
      std::sort(done.begin(), done.end(), [](const Done& a, const Done& b) {
        return a.chunk.begin < b.chunk.begin;
      });
      for (Done& d : done) {
        py::list values;
        for (FetchedTensor& t : d.outputs) values.append(ToNumpy(t));
        chunks.append(py::make_tuple(d.chunk.replica, d.chunk.begin,
                                     d.chunk.end, values));
      }
    }
    return py::make_tuple(status.code(), status.message(), chunks);
  }

  // The first phase of an atomic wave: runs calls[r] with feeds[r] for
  // every replica r, as RunWave does, writing nothing. The last `internal`
  // fetches of each call are kept for Commit, which feeds them to the
  // commit calls. With `check_finite`, also lists per replica the positions
  // of its fetches (internal ones included) holding a non-finite value.
  // Returns (code, message, outputs, run_metadata, nonfinite).
  py::tuple Compute(const std::vector<int>& calls, bool by_group,
                    const py::list& feeds, const std::vector<int>& dtypes,
                    int batch_feed, const py::bytes& run_options,
                    const py::bytes& other_options, bool want_metadata,
                    size_t internal, bool check_finite) {
    kept_.Discard();
    Wave wave = MakeWave(calls, by_group, feeds, dtypes, batch_feed);
    std::vector<std::vector<int>> nonfinite(wave.n);
    const Status status = RunTasks(
        calls, by_group, &wave, nullptr, {}, /*sync_call=*/-1, run_options,
        other_options, want_metadata, /*phase=*/0, internal,
        check_finite ? &nonfinite : nullptr);
    if (status.ok()) {
      kept_.Keep(std::move(wave.host), &wave.outputs, internal);
    }
    py::tuple result = wave.Result(status);
    return py::make_tuple(result[0], result[1], result[2], result[3],
                          py::cast(nonfinite));
  }

  // The second phase: for every replica r with commit[r], runs calls[r]
  // with Compute's feeds for r (still borrowed: the caller keeps them alive
  // until Commit or Discard) and then the tensors Compute kept for r; then
  // `sync_call`. Options as for RunWave. Returns (code, message, outputs,
  // run_metadata), outputs[r] empty for a replica not committed.
  py::tuple Commit(const std::vector<int>& calls, bool by_group,
                   const std::vector<bool>& commit, int sync_call,
                   const py::bytes& run_options,
                   const py::bytes& other_options, bool want_metadata) {
    ThrowIfError(kept_.CheckCommit(commit.size(), by_group, calls.size()));
    Wave wave(kept_.TakeFeeds());
    const std::vector<std::vector<const FetchedTensor*>> kept =
        kept_.Tensors();
    const Status status =
        RunTasks(calls, by_group, &wave, &kept, commit, sync_call,
                 run_options,
                 other_options, want_metadata, /*phase=*/1, 0, nullptr);
    kept_.Discard();
    return wave.Result(status);
  }

  // Between the phases of a synchronous-SGD wave: KeptWave::Average.
  void AverageKept(const std::vector<double>& weights) {
    ThrowIfError(kept_.Average(weights));
  }

  // Synchronous SGD over workers: KeptWave::Sums, as float64 arrays.
  py::list KeptSums(const std::vector<double>& weights) const {
    std::vector<std::vector<double>> sums;
    ThrowIfError(kept_.Sums(weights, &sums));
    py::list out;
    for (const std::vector<double>& sum : sums) {
      out.append(py::array_t<double>(sum.size(), sum.data()));
    }
    return out;
  }

  // KeptWave::Replace with float64 arrays (one per averaged tensor).
  void ReplaceKept(
      const std::vector<py::array_t<double, py::array::c_style |
                                                py::array::forcecast>>&
          arrays) {
    std::vector<std::vector<double>> values;
    for (const auto& a : arrays) {
      values.emplace_back(a.data(), a.data() + a.size());
    }
    ThrowIfError(kept_.Replace(values));
  }

  // Forgets what Compute kept.
  void Discard() { kept_.Discard(); }

  // The latest `last` timings, or all of them if `last` is 0.
  py::list TaskTimings(size_t last) const {
    const std::vector<TaskTiming> timings = scheduler_.Timings();
    const size_t first =
        last == 0 || last >= timings.size() ? 0 : timings.size() - last;
    py::list out;
    for (size_t i = first; i < timings.size(); ++i) {
      const TaskTiming& t = timings[i];
      out.append(py::make_tuple(t.wave, t.replica, t.stream_group, t.rows,
                                t.phase, t.start_ns * 1e-9, t.end_ns * 1e-9));
    }
    return out;
  }

  void ClearTaskTimings() { scheduler_.ClearTimings(); }
  static std::vector<int> fetchable_dtypes() {
    std::vector<int> dtypes = FetchableDtypes();
    dtypes.push_back(kTfString);
    return dtypes;
  }
  int num_stream_groups() const { return scheduler_.num_stream_groups(); }

 private:
  // `num_stream_groups`, or throws ValueError if the placement leaves a
  // replica's device without a stream group.
  static int CheckedGroups(int num_stream_groups,
                           const std::vector<int>& group_device,
                           const std::vector<int>& replica_device) {
    if (replica_device.empty()) return num_stream_groups;
    if (static_cast<int>(group_device.size()) != num_stream_groups) {
      throw py::value_error("TensorBow: one device per stream group expected");
    }
    for (int device : replica_device) {
      if (std::find(group_device.begin(), group_device.end(), device) ==
          group_device.end()) {
        throw py::value_error("TensorBow: device " + std::to_string(device) +
                              " of a replica has no stream group");
      }
    }
    return num_stream_groups;
  }

  Wave MakeWave(const std::vector<int>& calls, bool by_group,
                const py::list& feeds, const std::vector<int>& dtypes,
                int batch_feed) {
    const size_t n = py::len(feeds);
    if (calls.empty() || (!by_group && calls.size() != n)) {
      throw py::value_error("TensorBow: one feed list per replica expected");
    }
    if (by_group && n > replica_ids_.size()) {
      throw py::value_error("TensorBow: more replicas than the runtime has");
    }
    return Wave(feeds, dtypes, batch_feed,
                by_group ? replica_ids_.data() : nullptr);
  }

  // Runs calls[r] for every replica r (with commit[r], if commit is not
  // empty), fed wave->host[r] and then (*kept)[r], on the scheduler with
  // the GIL released; then `sync_call`. Replica 0 runs with `run_options`,
  // the others and the sync with `other_options`. The last `internal`
  // fetches stay TensorFlow's; `nonfinite`, if set, receives per replica
  // the positions of the fetches holding an infinity or a NaN.
  Status RunTasks(const std::vector<int>& calls, bool by_group, Wave* wave,
                  const std::vector<std::vector<const FetchedTensor*>>* kept,
                  const std::vector<bool>& commit, int sync_call,
                  const std::string& run_options,
                  const std::string& other_options, bool want_metadata,
                  int phase, size_t internal,
                  std::vector<std::vector<int>>* nonfinite) {
    const std::vector<const FetchedTensor*> none;
    std::vector<TaskScheduler::Task> tasks(wave->n);
    for (size_t r = 0; r < wave->n; ++r) {
      if (!commit.empty() && !commit[r]) continue;
      tasks[r] = [&, r, phase](int stream_group) {
        for (const SlowDown& d : slow_downs_) {
          d.Apply(static_cast<int>(r), phase, wave->rows[r]);
        }
        auto& outputs = wave->outputs[r];
        Status s = session_.Run(
            by_group ? calls[stream_group % calls.size()] : calls[r], wave->host[r], kept != nullptr ? (*kept)[r] : none,
            r == 0 ? run_options : other_options, &outputs,
            want_metadata && r == 0 ? &wave->metadata : nullptr, internal,
            arenas_[stream_group]);
        if (s.ok() && nonfinite != nullptr) {
          for (size_t i = 0; i < outputs.size(); ++i) {
            if (!outputs[i].AllFinite()) {
              (*nonfinite)[r].push_back(static_cast<int>(i));
            }
          }
        }
        return s;
      };
    }
    TaskScheduler::Task sync;
    if (sync_call >= 0) {
      sync = [&](int) {
        std::vector<FetchedTensor> fetched;
        return session_.Run(sync_call, {}, {}, other_options, &fetched,
                            nullptr);
      };
    }
    py::gil_scoped_release release;
    return scheduler_.RunWave(tasks, sync, wave->rows, phase);
  }

  std::vector<std::string> abi_ids_;
  std::vector<SlowDown> slow_downs_;  // TENSORBOW_TEST_SLOW_REPLICA
  TfSession session_;
  TaskScheduler scheduler_;
  // What a computed wave keeps for its commit.
  KeptWave<HostTensor, FetchedTensor> kept_;
  // 0, 1, ..., L - 1: what replica r's tasks are fed as their index.
  std::vector<ReplicaId> replica_ids_;
  // Per stream group, where its tasks' staged feeds are allocated.
  std::vector<Arena*> arenas_;
};

}  // namespace
}  // namespace runtime
}  // namespace tensorbow

PYBIND11_MODULE(_runtime, m) {
  using tensorbow::runtime::Runtime;
  m.doc() = "TensorBow's task scheduler over a TensorFlow session.";
  py::class_<Runtime>(m, "Runtime")
      .def(py::init<py::handle, int, int, std::vector<std::string>,
                    std::vector<int>, std::vector<int>>(),
           py::arg("session"), py::arg("num_stream_groups"),
           py::arg("num_replicas"), py::arg("abi_ids"),
           py::arg("group_device"), py::arg("replica_device"))
      .def("add_call", &Runtime::AddCall, py::arg("feeds"), py::arg("fetches"),
           py::arg("targets"))
      .def("run_wave", &Runtime::RunWave, py::arg("calls"),
           py::arg("by_group"), py::arg("feeds"),
           py::arg("dtypes"), py::arg("batch_feed"), py::arg("sync_call"),
           py::arg("run_options"),
           py::arg("other_options"), py::arg("want_metadata"))
      .def("run_pool", &Runtime::RunPool, py::arg("calls"), py::arg("feeds"),
           py::arg("dtypes"), py::arg("split"), py::arg("batch_sizes"),
           py::arg("options"))
      .def("compute", &Runtime::Compute, py::arg("calls"),
           py::arg("by_group"), py::arg("feeds"),
           py::arg("dtypes"), py::arg("batch_feed"), py::arg("run_options"),
           py::arg("other_options"), py::arg("want_metadata"),
           py::arg("internal"), py::arg("check_finite"))
      .def("commit", &Runtime::Commit, py::arg("calls"),
           py::arg("by_group"), py::arg("commit"),
           py::arg("sync_call"),
           py::arg("run_options"), py::arg("other_options"),
           py::arg("want_metadata"))
      .def("average_kept", &Runtime::AverageKept, py::arg("weights"))
      .def("kept_sums", &Runtime::KeptSums, py::arg("weights"))
      .def("replace_kept", &Runtime::ReplaceKept, py::arg("values"))
      .def("discard", &Runtime::Discard)
      .def("task_timings", &Runtime::TaskTimings, py::arg("last") = 0)
      .def("clear_task_timings", &Runtime::ClearTaskTimings)
      .def("arena_stats", &Runtime::ArenaStatistics)
      .def_property_readonly("num_stream_groups", &Runtime::num_stream_groups)
      .def_static("fetchable_dtypes", &Runtime::fetchable_dtypes);
}
