// The runtime's one adapter over TensorFlow's C API.
//
// A TfSession borrows the TF_Session of the user's tf.compat.v1.Session, so
// learning tasks run on the very graph and variables that plain runs use.
// Calls (feeds, fetches, targets) are prepared once and run many times from
// any thread; host tensors go in without a copy where TF allows it.
#ifndef TENSORBOW_CC_RUNTIME_TF_ADAPTER_H_
#define TENSORBOW_CC_RUNTIME_TF_ADAPTER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cc/runtime/host_tensor.h"
#include "cc/runtime/status.h"

namespace tensorbow {
namespace runtime {

// One output of an operation: a borrowed TF_Operation* and an index.
struct Endpoint {
  void* op;
  int index;
};

// A fetched tensor; owns its TF_Tensor until Release().
class FetchedTensor {
 public:
  FetchedTensor() = default;
  explicit FetchedTensor(void* tf_tensor) : tensor_(tf_tensor) {}
  FetchedTensor(FetchedTensor&& other) noexcept;
  FetchedTensor& operator=(FetchedTensor&& other) noexcept;
  ~FetchedTensor();

  int dtype() const;
  std::vector<int64_t> dims() const;
  void* data() const;
  size_t nbytes() const;
  std::vector<std::string> strings() const;  // for TF_STRING
  // False if a floating-point element is infinite or NaN.
  bool AllFinite() const;
  // The TF_Tensor, still owned by this object.
  void* get() const { return tensor_; }

  // A new tensor of `dtype` (a TF_DataType of fixed size) and `dims`,
  // its elements uninitialised.
  static FetchedTensor Allocate(int dtype, const std::vector<int64_t>& dims);

  // Hands the TF_Tensor to the caller, who frees it with Delete().
  void* Release();
  static void Delete(void* tf_tensor);

 private:
  void* tensor_ = nullptr;
};

// Counters of an Arena.
struct ArenaStats {
  int64_t num_allocs = 0;  // buffers served since the arena was made
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t system_allocs = 0;  // regions taken from the system allocator
  int64_t system_bytes = 0;  // bytes of those regions held now
};

// A stream group's allocation arena for the buffers the runtime stages
// per task (feed shards TensorFlow would otherwise copy because they are
// not aligned as Eigen wants): TensorFlow's BFCAllocator over regions
// from the system allocator, which it keeps and reuses. Reference-counted:
// a staged buffer keeps its arena alive until TensorFlow frees it.
class Arena {
 public:
  static Arena* New(const std::string& name);  // holds one reference
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void Unref();
  // A 64-byte aligned buffer, or null; each holds a reference.
  void* Allocate(size_t nbytes);
  ArenaStats Stats() const;
  // A TF_NewTensor deallocator; `arena` is the Arena that allocated it.
  static void Deallocate(void* data, size_t nbytes, void* arena);

 private:
  struct Impl;
  explicit Arena(const std::string& name);
  ~Arena();
  std::unique_ptr<Impl> impl_;
};

class TfSession {
 public:
  // `tf_session` is a TF_Session* that outlives this object.
  explicit TfSession(void* tf_session) : session_(tf_session) {}

  // Prepares a call and returns its id.
  int AddCall(const std::vector<Endpoint>& feeds,
              const std::vector<Endpoint>& fetches,
              const std::vector<void*>& targets);

  // Runs call `call` with `feeds` then `tensors` (in AddCall's order);
  // thread-safe. `tensors` are fetched tensors of an earlier run, fed
  // without a copy. `run_options` is a serialized RunOptions proto (may be
  // empty); `run_metadata`, if not null, receives a serialized RunMetadata.
  // The last `internal` outputs are left as TensorFlow returned them (to be
  // fed again); the others are made the caller's alone. Feeds that are not
  // aligned are staged in `arena` if given.
  Status Run(int call, const std::vector<HostTensor>& feeds,
             const std::vector<const FetchedTensor*>& tensors,
             const std::string& run_options,
             std::vector<FetchedTensor>* outputs, std::string* run_metadata,
             size_t internal = 0, Arena* arena = nullptr) const;

 private:
  struct Call;

  void* session_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<const Call>> calls_;
};

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_TF_ADAPTER_H_
