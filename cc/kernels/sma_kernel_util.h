// Helpers shared by the SMA kernels (sma_ops.cc, sma_with_central_ops.cc):
// checks of inputs, locking and reading variables as TensorFlow's training
// ops do, the kernels' base class, and the barrier resource that counts the
// replicas of a wave at one variable.
#ifndef TENSORBOW_CC_KERNELS_SMA_KERNEL_UTIL_H_
#define TENSORBOW_CC_KERNELS_SMA_KERNEL_UTIL_H_

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "cc/kernels/home_device.h"
#include "cc/kernels/sma_step.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tensorbow {

using CPUDevice = Eigen::ThreadPoolDevice;
using Eigen::Index;
using tensorflow::DataTypeString;
using tensorflow::DataTypeToEnum;
using tensorflow::DT_RESOURCE;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShapeUtils;
namespace errors = tensorflow::errors;

namespace functor {

// The step's precision policy (sma_step.h), for the functors.
using step::Wide;
using step::WideT;
using step::Widen;

// Cost of one element for Eigen's parallelFor: loads, stores, cycles.
template <typename T>
Eigen::TensorOpCost ElementCost(int loads, int stores, int cycles) {
  return Eigen::TensorOpCost(loads * sizeof(T), stores * sizeof(T), cycles);
}

// Elements [0, n) of one replica's step of kUpdate with its SMA correction
// (step::SmaElement), the correction stored in c. `g` holds T, or Wide<T>
// when the kernel made the gradient itself; `a` is unused for gradient
// descent.
template <step::Update kUpdate, typename T, typename G>
void SmaStretch(T* __restrict__ w, T* __restrict__ a, T* __restrict__ c,
                const T* __restrict__ z, const G* __restrict__ g, Index n,
                T alpha_t, T lr_t, T momentum_t) {
  constexpr bool kAccum = kUpdate != step::Update::kGradientDescent;
  const WideT<T> alpha = Widen(alpha_t), lr = Widen(lr_t);
  const WideT<T> momentum = Widen(momentum_t);
  for (Index i = 0; i < n; ++i) {
    c[i] = static_cast<T>(step::SmaElement<kUpdate>(
        w + i, kAccum ? a + i : nullptr, z[i], g[i], alpha, lr, momentum));
  }
}

// SmaStretch of gradient descent, momentum or Nesterov's (accum null for
// gradient descent).
template <typename T, typename G>
void SmaStretch(T* w, T* a, T* c, const T* z, const G* g, Index n, T alpha,
                T lr, T momentum, bool nesterov) {
  using step::Update;
  if (a == nullptr) {
    SmaStretch<Update::kGradientDescent>(w, a, c, z, g, n, alpha, lr,
                                         momentum);
  } else if (nesterov) {
    SmaStretch<Update::kNesterov>(w, a, c, z, g, n, alpha, lr, momentum);
  } else {
    SmaStretch<Update::kMomentum>(w, a, c, z, g, n, alpha, lr, momentum);
  }
}

}  // namespace functor

// The error for variable input `index`, named `name`, if it is not
// initialised or not of dtype T; OK otherwise.
template <typename T>
tensorflow::Status CheckVariable(OpKernelContext* ctx, int index,
                                 const char* name, bool initialized,
                                 tensorflow::DataType dtype) {
  if (!initialized) {
    return errors::FailedPrecondition(
        "Attempting to use uninitialized variable '", name, "' (input ",
        index, ") of ", ctx->op_kernel().name());
  }
  if (dtype != DataTypeToEnum<T>::value) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": variable '", name, "' has dtype ",
        DataTypeString(dtype), " but the op computes in ",
        DataTypeString(DataTypeToEnum<T>::value));
  }
  return absl::OkStatus();
}

// The writable tensor behind variable input `index` (ref or resource),
// checked to be initialised and of dtype T. Callers hold the locks: every
// SMA op has a resource input, so MaybeLockVariableInputMutexesInOrder
// always locks, reference variables' mutexes included.
template <typename T>
tensorflow::Status GetVariable(OpKernelContext* ctx, int index,
                               bool lock_held, const char* name,
                               Tensor* out) {
  if (ctx->input_dtype(index) == DT_RESOURCE) {
    // Checked before GetInputTensorFromVariable, which would CHECK-fail on
    // a dtype mismatch when it copies the variable.
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    TF_RETURN_IF_ERROR(tensorflow::LookupResource(
        ctx, tensorflow::HandleFromInput(ctx, index), &var));
    TF_RETURN_IF_ERROR(CheckVariable<T>(ctx, index, name, var->is_initialized,
                                        var->tensor()->dtype()));
  }
  TF_RETURN_IF_ERROR(tensorflow::GetInputTensorFromVariable<CPUDevice, T>(
      ctx, index, lock_held, /*sparse=*/false, out));
  return CheckVariable<T>(ctx, index, name, out->IsInitialized(),
                          out->dtype());
}

inline tensorflow::Status CheckSameShape(OpKernelContext* ctx, const Tensor& var,
                                  const Tensor& other, const char* name) {
  if (!var.shape().IsSameSize(other.shape())) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": '", name, "' must have the shape of var ",
        var.shape().DebugString(), ", got ", other.shape().DebugString());
  }
  return absl::OkStatus();
}

inline tensorflow::Status CheckScalar(OpKernelContext* ctx, const Tensor& t,
                               const char* name) {
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return errors::InvalidArgument(ctx->op_kernel().name(), ": '", name,
                                   "' must be a scalar, got shape ",
                                   t.shape().DebugString());
  }
  return absl::OkStatus();
}

// For an update taking its gradient as aᵀ·b: a and b must be matrices with
// as many rows, and var must have the shape of aᵀ·b.
inline tensorflow::Status CheckOuterFactors(OpKernelContext* ctx,
                                            const Tensor& var, const Tensor& a,
                                            const Tensor& b) {
  if (!TensorShapeUtils::IsMatrix(a.shape()) ||
      !TensorShapeUtils::IsMatrix(b.shape()) ||
      a.dim_size(0) != b.dim_size(0)) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(),
        ": 'a' and 'b' must be matrices with as many rows, got ",
        a.shape().DebugString(), " and ", b.shape().DebugString());
  }
  if (var.shape() !=
      tensorflow::TensorShape({a.dim_size(1), b.dim_size(1)})) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": var must have the shape of aᵀ·b [",
        a.dim_size(1), ", ", b.dim_size(1), "], got ",
        var.shape().DebugString());
  }
  return absl::OkStatus();
}

// The elements of `t` (of dtype T) in the step's arithmetic, Wide<T>: the
// tensor's own buffer when that is T, else a widened copy kept in `copy`.
template <typename T>
const functor::WideT<T>* WideFactor(const Tensor& t,
                                    std::vector<functor::WideT<T>>* copy) {
  const T* data = t.flat<T>().data();
  if constexpr (std::is_same_v<T, functor::WideT<T>>) {
    return data;
  } else {
    copy->resize(t.NumElements());
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      (*copy)[i] = functor::Widen(data[i]);
    }
    return copy->data();
  }
}

// The variables of an SGD update (var) or of a momentum update (var, accum),
// for LockVariables.
inline std::vector<const char*> UpdateVariableNames(bool momentum) {
  return momentum ? std::vector<const char*>{"var", "accum"}
                  : std::vector<const char*>{"var"};
}

// Locks variable inputs 0 .. names.size() - 1 as TensorFlow's training ops
// do (in address order) and gets their tensors into `vars`, each checked by
// GetVariable and to have the shape of the first. Keep the returned holder
// alive while the tensors are written; `status` says whether all is well.
template <typename T>
tensorflow::VariableInputLockHolder LockVariables(
    OpKernelContext* ctx, bool exclusive,
    const std::vector<const char*>& names, std::vector<Tensor>* vars,
    tensorflow::Status* status) {
  std::vector<int> inputs(names.size());
  for (size_t i = 0; i < names.size(); ++i) inputs[i] = static_cast<int>(i);
  auto locks = tensorflow::MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(
      ctx, exclusive, /*sparse=*/false, inputs);
  vars->resize(names.size());
  *status = absl::OkStatus();
  for (size_t i = 0; i < names.size() && status->ok(); ++i) {
    *status = GetVariable<T>(ctx, static_cast<int>(i), /*lock_held=*/true,
                             names[i], &(*vars)[i]);
    if (status->ok() && i > 0) {
      *status = CheckSameShape(ctx, (*vars)[0], (*vars)[i], names[i]);
    }
  }
  return locks;
}

inline void MaybeForwardRef(OpKernelContext* ctx) {
  if (ctx->input_dtype(0) != DT_RESOURCE) {
    ctx->forward_ref_input_to_ref_output(0, 0);
  }
}

class SmaOpBase : public OpKernel {
 public:
  explicit SmaOpBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_exclusive_lock_));
  }

 protected:
  bool use_exclusive_lock_ = false;
};

// The tensor of resource variable input `index`, checked to be initialised
// and of dtype T. The variable's lock is held only to take the reference:
// the central model's buffers change only after every replica has passed.
template <typename T>
tensorflow::Status ReadResource(OpKernelContext* ctx, int index,
                                const char* name, Tensor* out) {
  tensorflow::core::RefCountPtr<tensorflow::Var> var;
  const tensorflow::Status found = tensorflow::LookupResource(
      ctx, tensorflow::HandleFromInput(ctx, index), &var);
  if (absl::IsNotFound(found)) {
    return errors::FailedPrecondition(
        "Attempting to use uninitialized variable '", name, "' (input ",
        index, ") of ", ctx->op_kernel().name(), ": ", found.message());
  }
  TF_RETURN_IF_ERROR(found);
  tsl::tf_shared_lock lock(*var->mu());
  TF_RETURN_IF_ERROR(CheckVariable<T>(ctx, index, name, var->is_initialized,
                                      var->tensor()->dtype()));
  *out = *var->tensor();
  return absl::OkStatus();
}

// Counts the replicas that have reached one variable in the current wave
// and, for the *WithCentral ops, orders their corrections per chunk of the
// variable, keeping those that come ahead of their turn.
class SmaBarrier : public tensorflow::ResourceBase {
 public:
  std::string DebugString() const override { return "TensorBowSmaBarrier"; }

  // Counts one arrival; true for the N-th (or the last participant set
  // for this wave), which also starts a new count.
  bool Arrive(int n) {
    tsl::mutex_lock lock(mu_);
    if (++count_ < Expected(n)) return false;
    count_ = 0;
    started_ = 0;
    participants_ = 0;
    slot_started_.assign(slot_started_.size(), false);
    return true;
  }

  // Makes the coming wave end after `n` arrivals instead of all replicas'.
  void SetParticipants(int n) {
    tsl::mutex_lock lock(mu_);
    participants_ = n;
  }

  // Counts replica `slot` starting its pass; the first of the wave runs
  // `prepare` before any other may start. A failed `prepare` counts none,
  // and a slot that already started in this wave is refused. Abandon
  // undoes it for a pass that fails before it writes anything.
  template <typename Prepare>
  tensorflow::Status StartSlot(int slot, const Prepare& prepare) {
    tsl::mutex_lock lock(mu_);
    if (slot_started_.size() <= static_cast<size_t>(slot)) {
      slot_started_.resize(slot + 1, false);
    }
    if (slot_started_[slot]) {
      return errors::InvalidArgument(
          "TensorBow SMA barrier: replica slot ", slot,
          " already passed this variable in the current wave");
    }
    if (started_ == 0) TF_RETURN_IF_ERROR(prepare());
    ++started_;
    slot_started_[slot] = true;
    return absl::OkStatus();
  }

  void Abandon(int slot) {
    tsl::mutex_lock lock(mu_);
    --started_;
    slot_started_[slot] = false;
  }

  // Sizes the per-chunk state and gives each of `num_slots` replicas a
  // correction buffer of `dtype` and `shape`, on first use; a variable
  // keeps its size.
  tensorflow::Status UseChunks(OpKernelContext* ctx, int64_t num_chunks,
                               int num_slots, tensorflow::DataType dtype,
                               const tensorflow::TensorShape& shape) {
    tsl::mutex_lock lock(mu_);
    if (chunks_ == nullptr) {
      chunks_.reset(new Chunk[num_chunks]);
      num_chunks_ = num_chunks;
    } else if (num_chunks_ != num_chunks) {
      return errors::InvalidArgument("TensorBow SMA barrier: the variable "
                                     "changed size from ", num_chunks_,
                                     " to ", num_chunks, " chunks");
    }
    if (!slots_.empty()) {
      if (slots_.size() != static_cast<size_t>(num_slots) ||
          slots_[0].dtype() != dtype || slots_[0].shape() != shape) {
        return errors::InvalidArgument(
            "TensorBow SMA barrier: ", num_slots, " replicas of ",
            shape.DebugString(), " where there were ", slots_.size(),
            " of ", slots_[0].shape().DebugString());
      }
      return absl::OkStatus();
    }
    slots_.resize(num_slots);
    for (Tensor& slot : slots_) {
      TF_RETURN_IF_ERROR(ctx->allocate_temp(dtype, shape, &slot));
    }
    for (int64_t k = 0; k < num_chunks_; ++k) {
      chunks_[k].kept.assign(num_slots, false);
    }
    return absl::OkStatus();
  }

  // The correction buffer of `slot` (UseChunks).
  Tensor& Slot(int slot) { return slots_[slot]; }

  // Replica `slot`'s pass over chunk k, of the n replicas of the wave
  // (Participants), so that the chunk's corrections go into the next
  // central model in slot order: on its turn (every lower slot's
  // correction is in) fused(first) steps and adds its own, holding the
  // chunk's lock, `first` if no correction is in yet; ahead of its turn
  // deferred() steps keeping it in its slot, without the lock. Kept
  // corrections are added by add(slot, first) as their turn comes, and by
  // the n-th arrival in slot order past the slots that take no part in
  // the wave. Requires UseChunks.
  template <typename Fused, typename Deferred, typename Add>
  void AtChunk(int64_t k, int slot, int n, const Fused& fused,
               const Deferred& deferred, const Add& add) {
    Chunk& chunk = chunks_[k];
    {
      tsl::mutex_lock lock(chunk.mu);
      if (chunk.turn == slot) {
        fused(!chunk.started);
        chunk.started = true;
        ++chunk.turn;
        Arrived(chunk, n, add);
        return;
      }
    }
    deferred();
    tsl::mutex_lock lock(chunk.mu);
    chunk.kept[slot] = true;
    Arrived(chunk, n, add);
  }

  // How many replicas take part in the current wave, of `n`.
  int Participants(int n) {
    tsl::mutex_lock lock(mu_);
    return Expected(n);
  }

  void Reset() {
    tsl::mutex_lock lock(mu_);
    count_ = 0;
    started_ = 0;
    participants_ = 0;
    slot_started_.assign(slot_started_.size(), false);
    for (int64_t k = 0; k < num_chunks_; ++k) {
      tsl::mutex_lock chunk_lock(chunks_[k].mu);
      chunks_[k].arrivals = 0;
      chunks_[k].turn = 0;
      chunks_[k].started = false;
      chunks_[k].kept.assign(chunks_[k].kept.size(), false);
    }
  }

 private:
  struct Chunk {
    tsl::mutex mu;
    int arrivals = 0;
    int turn = 0;  // the slot whose correction goes in next
    bool started = false;  // a correction is in `next`
    std::vector<bool> kept;  // per slot: its correction waits for its turn
  };

  // After an arrival at `chunk`, holding its lock: adds the kept
  // corrections whose turn has come, and at the wave's n-th arrival every
  // one left, in slot order; then the chunk starts afresh.
  template <typename Add>
  static void Arrived(Chunk& chunk, int n, const Add& add) {
    const int slots = static_cast<int>(chunk.kept.size());
    const bool last = ++chunk.arrivals >= n;
    for (; chunk.turn < slots; ++chunk.turn) {
      if (!chunk.kept[chunk.turn]) {
        if (!last) break;
        continue;  // took no part in this wave
      }
      add(chunk.turn, !chunk.started);
      chunk.started = true;
      chunk.kept[chunk.turn] = false;
    }
    if (last) {
      chunk.arrivals = 0;
      chunk.turn = 0;
      chunk.started = false;
    }
  }

  int Expected(int n) const TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return participants_ > 0 ? participants_ : n;
  }

  tsl::mutex mu_;
  int count_ = 0;
  int started_ = 0;
  int participants_ = 0;  // 0: every replica
  std::unique_ptr<Chunk[]> chunks_;
  int64_t num_chunks_ = 0;
  std::vector<bool> slot_started_;  // per slot, in the current wave
  std::vector<Tensor> slots_;  // per slot, its kept correction
};

inline constexpr char kBarrierContainer[] = "tensorbow_sma_barriers";

inline tensorflow::Status LookupOrCreateBarrier(OpKernelContext* ctx,
                                         const std::string& name,
                                         SmaBarrier** barrier) {
  // At home: the replicas of a wave count at one barrier whatever device
  // their stream group runs on.
  return HomeResourceManager(ctx)->LookupOrCreate<SmaBarrier>(
      kBarrierContainer, name, barrier, [](SmaBarrier** b) {
        *b = new SmaBarrier;
        return absl::OkStatus();
      });
}

// Registers the CPU kernel __VA_ARGS__ (a kernel class for T) for both
// forms of one op: `ref_op` over reference variables and `resource_op`
// over resource handles. The kernels tell the two apart by their inputs'
// dtypes (GetVariable, MaybeForwardRef).
#define TENSORBOW_REGISTER_KERNEL_PAIR(ref_op, resource_op, T, ...)       \
  REGISTER_KERNEL_BUILDER(Name(ref_op)                                    \
                              .Device(tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T"),                    \
                          __VA_ARGS__);                                   \
  REGISTER_KERNEL_BUILDER(Name(resource_op)                               \
                              .Device(tensorflow::DEVICE_CPU)             \
                              .TypeConstraint<T>("T"),                    \
                          __VA_ARGS__);

}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_SMA_KERNEL_UTIL_H_
