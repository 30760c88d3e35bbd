#include "cc/runtime/tf_adapter.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/tf_tstring.h"
#include "xla/tsl/framework/bfc_allocator.h"

namespace tensorbow {
namespace runtime {

struct TfSession::Call {
  std::vector<TF_Output> feeds;
  std::vector<TF_Output> fetches;
  std::vector<TF_Operation*> targets;
};

namespace {

// Eigen's alignment in TensorFlow's build (EIGEN_MAX_ALIGN_BYTES): a fed
// buffer off it is copied by TF_NewTensor.
constexpr uintptr_t kAlignment = 64;

// Regions for the BFCAllocator, from the system allocator, counted.
class SystemRegions : public tsl::SubAllocator {
 public:
  SystemRegions() : tsl::SubAllocator({}, {}) {}

  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    alignment = std::max<size_t>(alignment, kAlignment);
    const size_t n = (num_bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, n);
    if (p != nullptr) {
      *bytes_received = n;
      allocs.fetch_add(1);
      bytes.fetch_add(static_cast<int64_t>(n));
    }
    return p;
  }

  void Free(void* ptr, size_t num_bytes) override {
    std::free(ptr);
    bytes.fetch_sub(static_cast<int64_t>(num_bytes));
  }

  bool SupportsCoalescing() const override { return false; }

  std::atomic<int64_t> allocs{0};
  std::atomic<int64_t> bytes{0};
};

void NoDeallocate(void*, size_t, void*) {}

TF_Output ToOutput(const Endpoint& e) {
  return TF_Output{static_cast<TF_Operation*>(e.op), e.index};
}

// A TF_Tensor over `host`: borrowed memory for plain dtypes, staged in
// `arena` if it is not aligned as Eigen wants (else TF copies it), fresh
// TF_TStrings for strings.
TF_Tensor* ToTfTensor(const HostTensor& host, Arena* arena) {
  const auto dtype = static_cast<TF_DataType>(host.dtype);
  if (dtype != TF_STRING && arena != nullptr && host.nbytes > 0 &&
      reinterpret_cast<uintptr_t>(host.data) % kAlignment != 0) {
    if (void* staged = arena->Allocate(host.nbytes)) {
      std::memcpy(staged, host.data, host.nbytes);
      return TF_NewTensor(dtype, host.dims.data(),
                          static_cast<int>(host.dims.size()), staged,
                          host.nbytes, &Arena::Deallocate, arena);
    }
  }
  if (dtype != TF_STRING) {
    return TF_NewTensor(dtype, host.dims.data(),
                        static_cast<int>(host.dims.size()), host.data,
                        host.nbytes, &NoDeallocate, nullptr);
  }
  TF_Tensor* t =
      TF_AllocateTensor(TF_STRING, host.dims.data(),
                        static_cast<int>(host.dims.size()),
                        host.strings.size() * sizeof(TF_TString));
  auto* elems = static_cast<TF_TString*>(TF_TensorData(t));
  for (size_t i = 0; i < host.strings.size(); ++i) {
    TF_TString_Init(&elems[i]);
    TF_TString_Copy(&elems[i], host.strings[i].data(), host.strings[i].size());
  }
  return t;
}

// `t` as a tensor that owns its memory alone, so the array made from it
// belongs to the caller: a fetched tensor may share its buffer with a
// variable (a reference variable's value) or sit in a fed buffer borrowed
// from the caller (an identity of a feed); those are copied.
TF_Tensor* SolelyOwned(TF_Tensor* t, const std::vector<HostTensor>& feeds) {
  if (t == nullptr || TF_TensorType(t) == TF_STRING) return t;
  const size_t nbytes = TF_TensorByteSize(t);
  const char* data = static_cast<const char*>(TF_TensorData(t));
  bool in_feed = false;
  for (const HostTensor& f : feeds) {
    const char* begin = static_cast<const char*>(f.data);
    if (begin != nullptr && data >= begin && data < begin + f.nbytes) {
      in_feed = true;
      break;
    }
  }
  if (!in_feed) {
    if (TF_Tensor* moved = TF_TensorMaybeMove(t)) return moved;
  }
  std::vector<int64_t> dims(TF_NumDims(t));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = TF_Dim(t, i);
  TF_Tensor* copy = TF_AllocateTensor(TF_TensorType(t), dims.data(),
                                      static_cast<int>(dims.size()), nbytes);
  if (nbytes > 0) std::memcpy(TF_TensorData(copy), data, nbytes);
  TF_DeleteTensor(t);
  return copy;
}

}  // namespace

struct Arena::Impl {
  explicit Impl(const std::string& name)
      : regions(new SystemRegions),
        bfc(std::unique_ptr<tsl::SubAllocator>(regions),
            /*total_memory=*/size_t{1} << 40, name, Options()) {}

  static tsl::BFCAllocator::Options Options() {
    tsl::BFCAllocator::Options options;
    options.allow_growth = true;
    options.allow_retry_on_failure = false;
    return options;
  }

  SystemRegions* regions;  // owned by bfc
  tsl::BFCAllocator bfc;
  std::atomic<int64_t> refs{1};
};

Arena::Arena(const std::string& name) : impl_(new Impl(name)) {}
Arena::~Arena() = default;

Arena* Arena::New(const std::string& name) { return new Arena(name); }

void Arena::Unref() {
  if (impl_->refs.fetch_sub(1) == 1) delete this;
}

void* Arena::Allocate(size_t nbytes) {
  void* p = impl_->bfc.AllocateRaw(kAlignment, nbytes);
  if (p != nullptr) impl_->refs.fetch_add(1);
  return p;
}

void Arena::Deallocate(void* data, size_t, void* arena) {
  auto* self = static_cast<Arena*>(arena);
  self->impl_->bfc.DeallocateRaw(data);
  self->Unref();
}

ArenaStats Arena::Stats() const {
  ArenaStats stats;
  if (auto bfc = impl_->bfc.GetStats()) {
    stats.num_allocs = bfc->num_allocs;
    stats.bytes_in_use = bfc->bytes_in_use;
    stats.peak_bytes_in_use = bfc->peak_bytes_in_use;
  }
  stats.system_allocs = impl_->regions->allocs.load();
  stats.system_bytes = impl_->regions->bytes.load();
  return stats;
}

FetchedTensor::FetchedTensor(FetchedTensor&& other) noexcept
    : tensor_(other.tensor_) {
  other.tensor_ = nullptr;
}

FetchedTensor& FetchedTensor::operator=(FetchedTensor&& other) noexcept {
  if (this != &other) {
    Delete(tensor_);
    tensor_ = other.tensor_;
    other.tensor_ = nullptr;
  }
  return *this;
}

FetchedTensor::~FetchedTensor() { Delete(tensor_); }

int FetchedTensor::dtype() const {
  return TF_TensorType(static_cast<TF_Tensor*>(tensor_));
}

std::vector<int64_t> FetchedTensor::dims() const {
  auto* t = static_cast<TF_Tensor*>(tensor_);
  std::vector<int64_t> dims(TF_NumDims(t));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = TF_Dim(t, i);
  return dims;
}

void* FetchedTensor::data() const {
  return TF_TensorData(static_cast<TF_Tensor*>(tensor_));
}

size_t FetchedTensor::nbytes() const {
  return TF_TensorByteSize(static_cast<TF_Tensor*>(tensor_));
}

std::vector<std::string> FetchedTensor::strings() const {
  auto* t = static_cast<TF_Tensor*>(tensor_);
  const int64_t n = TF_TensorElementCount(t);
  const auto* elems = static_cast<const TF_TString*>(TF_TensorData(t));
  std::vector<std::string> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    out.emplace_back(TF_TString_GetDataPointer(&elems[i]),
                     TF_TString_GetSize(&elems[i]));
  }
  return out;
}

bool FetchedTensor::AllFinite() const {
  auto* t = static_cast<TF_Tensor*>(tensor_);
  if (t == nullptr) return true;
  const int64_t n = TF_TensorElementCount(t);
  const void* data = TF_TensorData(t);
  switch (TF_TensorType(t)) {
    case TF_FLOAT: {
      const float* v = static_cast<const float*>(data);
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(v[i]);
      return ok;
    }
    case TF_DOUBLE: {
      const double* v = static_cast<const double*>(data);
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(v[i]);
      return ok;
    }
    case TF_HALF:
    case TF_BFLOAT16: {
      // All exponent bits set: an infinity or a NaN.
      const uint16_t mask = TF_TensorType(t) == TF_HALF ? 0x7C00 : 0x7F80;
      const uint16_t* v = static_cast<const uint16_t*>(data);
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) ok &= (v[i] & mask) != mask;
      return ok;
    }
    default:
      return true;
  }
}

FetchedTensor FetchedTensor::Allocate(int dtype,
                                      const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  const auto type = static_cast<TF_DataType>(dtype);
  return FetchedTensor(TF_AllocateTensor(
      type, dims.data(), static_cast<int>(dims.size()),
      static_cast<size_t>(count) * TF_DataTypeSize(type)));
}

void* FetchedTensor::Release() {
  void* t = tensor_;
  tensor_ = nullptr;
  return t;
}

void FetchedTensor::Delete(void* tf_tensor) {
  if (tf_tensor != nullptr) TF_DeleteTensor(static_cast<TF_Tensor*>(tf_tensor));
}

int TfSession::AddCall(const std::vector<Endpoint>& feeds,
                       const std::vector<Endpoint>& fetches,
                       const std::vector<void*>& targets) {
  auto call = std::make_shared<Call>();
  for (const auto& e : feeds) call->feeds.push_back(ToOutput(e));
  for (const auto& e : fetches) call->fetches.push_back(ToOutput(e));
  for (void* op : targets) {
    call->targets.push_back(static_cast<TF_Operation*>(op));
  }
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(call));
  return static_cast<int>(calls_.size()) - 1;
}

Status TfSession::Run(int call_id, const std::vector<HostTensor>& feeds,
                      const std::vector<const FetchedTensor*>& tensors,
                      const std::string& run_options,
                      std::vector<FetchedTensor>* outputs,
                      std::string* run_metadata, size_t internal,
                      Arena* arena) const {
  std::shared_ptr<const Call> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call_id < 0 || call_id >= static_cast<int>(calls_.size())) {
      return Status(kInternal, "TensorBow runtime: unknown call " +
                                   std::to_string(call_id));
    }
    call = calls_[call_id];
  }
  if (feeds.size() + tensors.size() != call->feeds.size() ||
      internal > call->fetches.size()) {
    return Status(kInvalidArgument,
                  "TensorBow runtime: call expects " +
                      std::to_string(call->feeds.size()) + " feeds, got " +
                      std::to_string(feeds.size() + tensors.size()));
  }
  std::vector<TF_Tensor*> inputs;
  inputs.reserve(call->feeds.size());
  for (const auto& f : feeds) inputs.push_back(ToTfTensor(f, arena));
  const size_t borrowed = inputs.size();
  for (const FetchedTensor* t : tensors) {
    inputs.push_back(static_cast<TF_Tensor*>(t->get()));
  }
  std::vector<TF_Tensor*> values(call->fetches.size(), nullptr);

  TF_Buffer* options = nullptr;
  if (!run_options.empty()) {
    options = TF_NewBufferFromString(run_options.data(), run_options.size());
  }
  TF_Buffer* metadata = run_metadata != nullptr ? TF_NewBuffer() : nullptr;
  TF_Status* status = TF_NewStatus();
  TF_SessionRun(static_cast<TF_Session*>(session_), options,
                call->feeds.data(), inputs.data(),
                static_cast<int>(inputs.size()), call->fetches.data(),
                values.data(), static_cast<int>(values.size()),
                call->targets.data(), static_cast<int>(call->targets.size()),
                metadata, status);
  Status result(TF_GetCode(status), TF_Message(status));
  TF_DeleteStatus(status);
  for (size_t i = 0; i < borrowed; ++i) TF_DeleteTensor(inputs[i]);
  if (options != nullptr) TF_DeleteBuffer(options);
  if (metadata != nullptr) {
    if (result.ok()) {
      run_metadata->assign(static_cast<const char*>(metadata->data),
                           metadata->length);
    }
    TF_DeleteBuffer(metadata);
  }
  outputs->clear();
  outputs->reserve(values.size());
  const size_t owned = values.size() - internal;
  for (size_t i = 0; i < values.size(); ++i) {
    outputs->emplace_back(i < owned ? SolelyOwned(values[i], feeds)
                                    : values[i]);
  }
  return result;
}

}  // namespace runtime
}  // namespace tensorbow
