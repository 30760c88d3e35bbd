// Python binding of the runtime (module tensorbow._runtime).
//
// The only file that knows pybind11 and NumPy: it turns TensorFlow's Python
// handles (TF_Session, TF_Operation) into pointers, NumPy arrays into
// HostTensors and fetched tensors back into arrays without copying them,
// the runtime's refusals into Python exceptions, and releases the GIL
// while a wave runs. How a wave runs is wave_runner.h's.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

#include "cc/runtime/host_tensor.h"
#include "cc/runtime/scheduler.h"
#include "cc/runtime/status.h"
#include "cc/runtime/tf_adapter.h"
#include "cc/runtime/wave_runner.h"

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

// The runtime's refusals as Python's errors: ValueError for a bad argument.
void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  if (status.code() == kInvalidArgument) {
    throw py::value_error(status.message());
  }
  throw std::runtime_error(status.message());
}

// `arrays` as HostTensors of `dtypes`, one dtype per array, borrowed.
std::vector<HostTensor> ToHostTensors(const py::list& arrays,
                                      const std::vector<int>& dtypes) {
  std::vector<HostTensor> out;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    out.push_back(ToHostTensor(arrays[i].cast<py::array>(), dtypes[i]));
  }
  return out;
}

// Per replica, its feeds: a list of arrays per replica, each of `dtypes`.
std::vector<std::vector<HostTensor>> ToReplicaFeeds(
    const py::list& feeds, const std::vector<int>& dtypes) {
  std::vector<std::vector<HostTensor>> out;
  for (py::handle replica_feeds : feeds) {
    const py::list arrays = replica_feeds.cast<py::list>();
    if (py::len(arrays) != dtypes.size()) {
      throw py::value_error("TensorBow: feeds and dtypes differ in length");
    }
    out.push_back(ToHostTensors(arrays, dtypes));
  }
  return out;
}

py::list ToNumpyList(std::vector<FetchedTensor>& tensors) {
  py::list values;
  for (FetchedTensor& t : tensors) values.append(ToNumpy(t));
  return values;
}

// Whether the interpreter has begun to exit; safe without the GIL.
bool InterpreterExiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// The scheduler's blocking calls with the GIL released.
//
// A wave may end after the interpreter began to exit: a daemon thread's
// wave blocked inside TensorFlow (a queue runner's, on an accumulator)
// and cancelled by a close just before the script's end. Taking the GIL
// back then ends the thread with pthread_exit (Python before 3.14), an
// unwind that calls std::terminate() if it meets a destructor, as
// gil_scoped_release's is ("terminate called without an active
// exception"). So the GIL is taken back outside any destructor, and not
// at all once the interpreter exits: the thread, holding no lock of the
// scheduler (its wave is over), waits for the process to end, as Python
// 3.14 makes such threads do.
Status WithoutTheGil(const std::function<Status()>& wait) {
  PyThreadState* state = PyEval_SaveThread();
  Status status;
  try {
    status = wait();
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
  if (InterpreterExiting()) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  // Should the interpreter begin to exit meanwhile, this ends the thread
  // by an unwind that pybind11's dispatcher lets through, destructors run.
  PyEval_RestoreThread(state);
  return status;
}

// Python's face of a WaveRunner over TensorFlow's session: conversions of
// its arguments and results. A wave's result is (code, message, outputs,
// run_metadata), outputs[r] holding replica r's fetches as NumPy arrays.
class Runtime {
 public:
  using Waves = WaveRunner<TfSession, FetchedTensor, Arena>;

  // `group_device` and `replica_device`: as TaskScheduler's placement
  // (empty: none); every device of a replica must have a stream group.
  Runtime(py::handle session, int num_stream_groups, int num_replicas,
          std::vector<std::string> abi_ids, std::vector<int> group_device,
          std::vector<int> replica_device)
      : abi_ids_(std::move(abi_ids)),
        session_(PointerFromConduit<TF_Session>(session, abi_ids_,
                                                "TF_Session")) {
    ThrowIfError(
        CheckPlacement(num_stream_groups, group_device, replica_device));
    waves_ = std::make_unique<Waves>(
        &session_, num_stream_groups, num_replicas, std::move(group_device),
        std::move(replica_device), SlowDownsFromEnvironment(),
        WithoutTheGil);
  }

  // Per stream group, its arena's counters.
  py::list ArenaStatistics() const {
    py::list out;
    for (const Arena* arena : waves_->arenas()) {
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

  // WaveRunner::RunWave.
  py::tuple RunWave(const std::vector<int>& calls, bool by_group,
                    const py::list& feeds, const std::vector<int>& dtypes,
                    int batch_feed, int sync_call,
                    const py::bytes& run_options,
                    const py::bytes& other_options, bool want_metadata) {
    CheckWave(calls, by_group, feeds, dtypes, batch_feed);
    Waves::WaveResult result;
    ThrowIfError(waves_->RunWave(
        calls, by_group, ToReplicaFeeds(feeds, dtypes), batch_feed,
        sync_call, {run_options, other_options, want_metadata}, &result));
    return ToTuple(result);
  }

  // WaveRunner::RunPool. Returns (code, message, chunks): per chunk in
  // the order of its rows, (replica, begin, end, outputs).
  py::tuple RunPool(const std::vector<int>& calls, const py::list& feeds,
                    const std::vector<int>& dtypes,
                    const std::vector<bool>& split,
                    const std::vector<int64_t>& batch_sizes,
                    const py::bytes& options) {
    // Checked before the feeds are converted, as CheckWave's.
    ThrowIfError(waves_->CheckPool(calls, py::len(feeds), dtypes.size(),
                                   split.size(), batch_sizes));
    Waves::PoolResult result;
    ThrowIfError(waves_->RunPool(calls, ToHostTensors(feeds, dtypes), split,
                                 batch_sizes, options, &result));
    py::list chunks;
    for (Waves::ChunkResult& c : result.chunks) {
      chunks.append(py::make_tuple(c.chunk.replica, c.chunk.begin,
                                   c.chunk.end, ToNumpyList(c.outputs)));
    }
    return py::make_tuple(result.status.code(), result.status.message(),
                          chunks);
  }

  // WaveRunner::Compute. Returns (code, message, outputs, run_metadata,
  // nonfinite).
  py::tuple Compute(const std::vector<int>& calls, bool by_group,
                    const py::list& feeds, const std::vector<int>& dtypes,
                    int batch_feed, const py::bytes& run_options,
                    const py::bytes& other_options, bool want_metadata,
                    size_t internal, bool check_finite) {
    waves_->Discard();  // even if the feeds are refused
    CheckWave(calls, by_group, feeds, dtypes, batch_feed);
    Waves::WaveResult result;
    ThrowIfError(waves_->Compute(
        calls, by_group, ToReplicaFeeds(feeds, dtypes), batch_feed,
        {run_options, other_options, want_metadata}, internal, check_finite,
        &result));
    py::tuple wave = ToTuple(result);
    return py::make_tuple(wave[0], wave[1], wave[2], wave[3],
                          py::cast(result.nonfinite));
  }

  // WaveRunner::Commit; outputs[r] is empty for a replica not committed.
  py::tuple Commit(const std::vector<int>& calls, bool by_group,
                   const std::vector<bool>& commit, int sync_call,
                   const py::bytes& run_options,
                   const py::bytes& other_options, bool want_metadata) {
    Waves::WaveResult result;
    ThrowIfError(waves_->Commit(calls, by_group, commit, sync_call,
                                {run_options, other_options, want_metadata},
                                &result));
    return ToTuple(result);
  }

  void AverageKept(const std::vector<double>& weights) {
    ThrowIfError(waves_->AverageKept(weights));
  }

  // WaveRunner::KeptSums, as float64 arrays.
  py::list KeptSums(const std::vector<double>& weights) const {
    std::vector<std::vector<double>> sums;
    ThrowIfError(waves_->KeptSums(weights, &sums));
    py::list out;
    for (const std::vector<double>& sum : sums) {
      out.append(py::array_t<double>(sum.size(), sum.data()));
    }
    return out;
  }

  // WaveRunner::ReplaceKept with float64 arrays (one per averaged tensor).
  void ReplaceKept(
      const std::vector<py::array_t<double, py::array::c_style |
                                                py::array::forcecast>>&
          arrays) {
    std::vector<std::vector<double>> values;
    for (const auto& a : arrays) {
      values.emplace_back(a.data(), a.data() + a.size());
    }
    ThrowIfError(waves_->ReplaceKept(values));
  }

  void Discard() { waves_->Discard(); }

  // The latest `last` timings, or all of them if `last` is 0.
  py::list TaskTimings(size_t last) const {
    py::list out;
    for (const TaskTiming& t : waves_->Timings(last)) {
      out.append(py::make_tuple(t.wave, t.replica, t.stream_group, t.rows,
                                t.phase, t.start_ns * 1e-9, t.end_ns * 1e-9));
    }
    return out;
  }

  void ClearTaskTimings() { waves_->ClearTimings(); }
  static std::vector<int> fetchable_dtypes() {
    std::vector<int> dtypes = FetchableDtypes();
    dtypes.push_back(kTfString);
    return dtypes;
  }
  int num_stream_groups() const { return waves_->num_stream_groups(); }

 private:
  // WaveRunner's checks of a wave's calls and batch feed, made here
  // before the feeds are converted, so that they are reported before a
  // bad array is.
  void CheckWave(const std::vector<int>& calls, bool by_group,
                 const py::list& feeds, const std::vector<int>& dtypes,
                 int batch_feed) const {
    ThrowIfError(waves_->CheckCalls(calls, by_group, py::len(feeds)));
    ThrowIfError(CheckBatchFeed(batch_feed, dtypes.size()));
  }

  // (code, message, outputs, run_metadata); outputs only on success.
  static py::tuple ToTuple(Waves::WaveResult& result) {
    py::list outputs;
    for (std::vector<FetchedTensor>& replica : result.outputs) {
      outputs.append(ToNumpyList(replica));
    }
    return py::make_tuple(result.status.code(), result.status.message(),
                          outputs, py::bytes(result.run_metadata));
  }

  std::vector<std::string> abi_ids_;
  TfSession session_;
  std::unique_ptr<Waves> waves_;
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
