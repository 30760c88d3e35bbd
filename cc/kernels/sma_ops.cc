// CPU kernels for synchronous model averaging (SMA); ops in cc/ops/sma_ops.cc.
//
// Kernels validate their inputs and lock the variables they write, as
// TensorFlow's own training ops do (training_op_helpers.h handles the
// difference between reference and resource variables); the arithmetic is in
// the functors, each one pass over the variable's memory, split across
// TensorFlow's intra-op thread pool for large tensors.
#define EIGEN_USE_THREADS

#include "cc/kernels/sma_ops.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/kernels/training_op_helpers.h"

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

// Cost of one element for Eigen's parallelFor: loads, stores, cycles.
template <typename T>
Eigen::TensorOpCost ElementCost(int loads, int stores, int cycles) {
  return Eigen::TensorOpCost(loads * sizeof(T), stores * sizeof(T), cycles);
}

// The loops below take __restrict__ pointers (the buffers never alias) so
// the compiler vectorises them; each is one pass over every buffer.

template <typename T>
struct ApplySmaGradientDescent<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, Flat<T> correction,
                  ConstFlat<T> central, T alpha, T lr, ConstFlat<T> delta) {
    T* w = var.data();
    T* c = correction.data();
    const T* z = central.data();
    const T* g = delta.data();
    d.parallelFor(var.size(), ElementCost<T>(3, 2, 5),
                  [=](Index first, Index last) {
                    Step(w + first, c + first, z + first, g + first,
                         last - first, alpha, lr);
                  });
  }

  static void Step(T* __restrict__ w, T* __restrict__ c,
                   const T* __restrict__ z, const T* __restrict__ g,
                   Index n, T alpha, T lr) {
    for (Index i = 0; i < n; ++i) {
      const T ci = alpha * (w[i] - z[i]);
      c[i] = ci;
      w[i] = w[i] - lr * g[i] - ci;
    }
  }
};

template <typename T>
struct ApplySmaMomentum<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, Flat<T> accum,
                  Flat<T> correction, ConstFlat<T> central, T alpha, T lr,
                  ConstFlat<T> grad, T momentum, bool use_nesterov) {
    T* w = var.data();
    T* a = accum.data();
    T* c = correction.data();
    const T* z = central.data();
    const T* g = grad.data();
    d.parallelFor(var.size(), ElementCost<T>(4, 3, 9),
                  [=](Index first, Index last) {
                    if (use_nesterov) {
                      Step<true>(w + first, a + first, c + first, z + first,
                                 g + first, last - first, alpha, lr, momentum);
                    } else {
                      Step<false>(w + first, a + first, c + first, z + first,
                                  g + first, last - first, alpha, lr,
                                  momentum);
                    }
                  });
  }

  template <bool kNesterov>
  static void Step(T* __restrict__ w, T* __restrict__ a, T* __restrict__ c,
                   const T* __restrict__ z, const T* __restrict__ g, Index n,
                   T alpha, T lr, T momentum) {
    for (Index i = 0; i < n; ++i) {
      const T ci = alpha * (w[i] - z[i]);
      c[i] = ci;
      const T ai = momentum * a[i] + g[i];
      a[i] = ai;
      const T step = kNesterov ? lr * g[i] + lr * momentum * ai : lr * ai;
      w[i] = w[i] - step - ci;
    }
  }
};

template <typename T>
struct SmaCorrection<CPUDevice, T> {
  void operator()(const CPUDevice& d, ConstFlat<T> var, Flat<T> correction,
                  ConstFlat<T> central, T alpha) {
    const T* w = var.data();
    T* c = correction.data();
    const T* z = central.data();
    d.parallelFor(var.size(), ElementCost<T>(2, 1, 2),
                  [=](Index first, Index last) {
                    Step(w + first, c + first, z + first, last - first, alpha);
                  });
  }

  static void Step(const T* __restrict__ w, T* __restrict__ c,
                   const T* __restrict__ z, Index n, T alpha) {
    for (Index i = 0; i < n; ++i) c[i] = alpha * (w[i] - z[i]);
  }
};

template <typename T>
struct ApplySmaCorrection<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, ConstFlat<T> correction) {
    T* w = var.data();
    const T* c = correction.data();
    d.parallelFor(var.size(), ElementCost<T>(2, 1, 1),
                  [=](Index first, Index last) {
                    Step(w + first, c + first, last - first);
                  });
  }

  static void Step(T* __restrict__ w, const T* __restrict__ c, Index n) {
    for (Index i = 0; i < n; ++i) w[i] -= c[i];
  }
};

template <typename T>
struct ApplySmaCentral<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> central, Flat<T> central_prev,
                  const std::vector<ConstFlat<T>>& corrections, T momentum) {
    T* z = central.data();
    T* zp = central_prev.data();
    std::vector<const T*> cs;
    cs.reserve(corrections.size());
    for (const auto& c : corrections) cs.push_back(c.data());
    const int n = static_cast<int>(cs.size());
    d.parallelFor(central.size(), ElementCost<T>(2 + n, 2, 3 + n),
                  [z, zp, &cs, momentum](Index first, Index last) {
                    Step(z + first, zp + first, cs, first, last - first,
                         momentum);
                  });
  }

  // Sums the corrections into z's buffer block by block, then applies the
  // momentum term, so each loop is a simple vectorisable one.
  static void Step(T* __restrict__ z, T* __restrict__ zp,
                   const std::vector<const T*>& cs, Index offset, Index n,
                   T momentum) {
    constexpr Index kBlock = 1024;
    T sum[kBlock];
    for (Index b = 0; b < n; b += kBlock) {
      const Index m = std::min(kBlock, n - b);
      const T* __restrict__ c0 = cs[0] + offset + b;
      for (Index i = 0; i < m; ++i) sum[i] = c0[i];
      for (size_t j = 1; j < cs.size(); ++j) {
        const T* __restrict__ cj = cs[j] + offset + b;
        for (Index i = 0; i < m; ++i) sum[i] += cj[i];
      }
      T* __restrict__ zb = z + b;
      T* __restrict__ zpb = zp + b;
      for (Index i = 0; i < m; ++i) {
        const T zi = zb[i];
        zb[i] = zi + sum[i] + momentum * (zi - zpb[i]);
        zpb[i] = zi;
      }
    }
  }
};

// The *WithCentral functors run on one chunk of a variable, on the calling
// thread: the kernel spreads the chunks over the pool and serialises the
// replicas per chunk (see ApplySmaWithCentralOp).

// next = z + mu * (z - z_prev) + c  (first)  or  next += c
template <typename T, bool kFirst>
inline void AddToNext(T* __restrict__ next, const T* __restrict__ z,
                      const T* __restrict__ zp, Index i, T ci, T mu) {
  if (kFirst) {
    next[i] = z[i] + mu * (z[i] - zp[i]) + ci;
  } else {
    next[i] += ci;
  }
}

template <typename T>
struct ApplySmaGradientDescentWithCentral<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, ConstFlat<T> central,
                  ConstFlat<T> central_prev, Flat<T> next, T alpha, T lr,
                  ConstFlat<T> delta, T central_momentum, bool first) {
    if (first) {
      Step<true>(var.data(), central.data(), central_prev.data(), next.data(),
                 delta.data(), var.size(), alpha, lr, central_momentum);
    } else {
      Step<false>(var.data(), central.data(), central_prev.data(),
                  next.data(), delta.data(), var.size(), alpha, lr,
                  central_momentum);
    }
  }

  template <bool kFirst>
  static void Step(T* __restrict__ w, const T* __restrict__ z,
                   const T* __restrict__ zp, T* __restrict__ next,
                   const T* __restrict__ g, Index n, T alpha, T lr, T mu) {
    for (Index i = 0; i < n; ++i) {
      const T ci = alpha * (w[i] - z[i]);
      w[i] = w[i] - lr * g[i] - ci;
      AddToNext<T, kFirst>(next, z, zp, i, ci, mu);
    }
  }
};

template <typename T>
struct ApplySmaMomentumWithCentral<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, Flat<T> accum,
                  ConstFlat<T> central, ConstFlat<T> central_prev,
                  Flat<T> next, T alpha, T lr, ConstFlat<T> grad, T momentum,
                  bool use_nesterov, T central_momentum, bool first) {
    auto step = first ? (use_nesterov ? &Step<true, true> : &Step<false, true>)
                      : (use_nesterov ? &Step<true, false>
                                      : &Step<false, false>);
    step(var.data(), accum.data(), central.data(), central_prev.data(),
         next.data(), grad.data(), var.size(), alpha, lr, momentum,
         central_momentum);
  }

  template <bool kNesterov, bool kFirst>
  static void Step(T* __restrict__ w, T* __restrict__ a,
                   const T* __restrict__ z, const T* __restrict__ zp,
                   T* __restrict__ next, const T* __restrict__ g, Index n,
                   T alpha, T lr, T momentum, T mu) {
    for (Index i = 0; i < n; ++i) {
      const T ci = alpha * (w[i] - z[i]);
      const T ai = momentum * a[i] + g[i];
      a[i] = ai;
      const T step = kNesterov ? lr * g[i] + lr * momentum * ai : lr * ai;
      w[i] = w[i] - step - ci;
      AddToNext<T, kFirst>(next, z, zp, i, ci, mu);
    }
  }
};

}  // namespace functor

namespace {

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
    if (!var->is_initialized) {
      return errors::FailedPrecondition(
          "Attempting to use uninitialized variable '", name, "' (input ",
          index, ") of ", ctx->op_kernel().name());
    }
    if (var->tensor()->dtype() != DataTypeToEnum<T>::value) {
      return errors::InvalidArgument(
          ctx->op_kernel().name(), ": variable '", name, "' has dtype ",
          DataTypeString(var->tensor()->dtype()),
          " but the op computes in ", DataTypeString(DataTypeToEnum<T>::value));
    }
  }
  TF_RETURN_IF_ERROR(tensorflow::GetInputTensorFromVariable<CPUDevice, T>(
      ctx, index, lock_held, /*sparse=*/false, out));
  if (!out->IsInitialized()) {
    return errors::FailedPrecondition(
        "Attempting to use uninitialized variable '", name, "' (input ",
        index, ") of ", ctx->op_kernel().name());
  }
  if (out->dtype() != DataTypeToEnum<T>::value) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": variable '", name, "' has dtype ",
        DataTypeString(out->dtype()), " but the op computes in ",
        DataTypeString(DataTypeToEnum<T>::value));
  }
  return absl::OkStatus();
}

tensorflow::Status CheckSameShape(OpKernelContext* ctx, const Tensor& var,
                                  const Tensor& other, const char* name) {
  if (!var.shape().IsSameSize(other.shape())) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": '", name, "' must have the shape of var ",
        var.shape().DebugString(), ", got ", other.shape().DebugString());
  }
  return absl::OkStatus();
}

tensorflow::Status CheckScalar(OpKernelContext* ctx, const Tensor& t,
                               const char* name) {
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return errors::InvalidArgument(ctx->op_kernel().name(), ": '", name,
                                   "' must be a scalar, got shape ",
                                   t.shape().DebugString());
  }
  return absl::OkStatus();
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

void MaybeForwardRef(OpKernelContext* ctx) {
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

template <typename T>
class ApplySmaGradientDescentOp : public SmaOpBase {
 public:
  using SmaOpBase::SmaOpBase;

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"var", "correction"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    Tensor& var = vars[0];
    Tensor& correction = vars[1];
    const Tensor& central = ctx->input(2);
    const Tensor& alpha = ctx->input(3);
    const Tensor& lr = ctx->input(4);
    const Tensor& delta = ctx->input(5);
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, central, "central"));
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, delta, "delta"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, alpha, "alpha"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, lr, "lr"));
    functor::ApplySmaGradientDescent<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), var.flat<T>(), correction.flat<T>(),
        central.flat<T>(), alpha.scalar<T>()(), lr.scalar<T>()(),
        delta.flat<T>());
    MaybeForwardRef(ctx);
  }
};

template <typename T>
class ApplySmaMomentumOp : public SmaOpBase {
 public:
  explicit ApplySmaMomentumOp(OpKernelConstruction* ctx) : SmaOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"var", "accum", "correction"}, &vars,
                                  &status);
    OP_REQUIRES_OK(ctx, status);
    Tensor& var = vars[0];
    Tensor& accum = vars[1];
    Tensor& correction = vars[2];
    const Tensor& central = ctx->input(3);
    const Tensor& alpha = ctx->input(4);
    const Tensor& lr = ctx->input(5);
    const Tensor& grad = ctx->input(6);
    const Tensor& momentum = ctx->input(7);
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, central, "central"));
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, grad, "grad"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, alpha, "alpha"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, lr, "lr"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, momentum, "momentum"));
    functor::ApplySmaMomentum<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), var.flat<T>(), accum.flat<T>(),
        correction.flat<T>(), central.flat<T>(), alpha.scalar<T>()(),
        lr.scalar<T>()(), grad.flat<T>(), momentum.scalar<T>()(),
        use_nesterov_);
    MaybeForwardRef(ctx);
  }

 private:
  bool use_nesterov_ = false;
};

template <typename T>
class SmaCorrectionOp : public SmaOpBase {
 public:
  using SmaOpBase::SmaOpBase;

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"var", "correction"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    const Tensor& var = vars[0];
    Tensor& correction = vars[1];
    const Tensor& central = ctx->input(2);
    const Tensor& alpha = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, central, "central"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, alpha, "alpha"));
    functor::SmaCorrection<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), var.flat<T>(),
        correction.flat<T>(), central.flat<T>(), alpha.scalar<T>()());
  }
};

template <typename T>
class ApplySmaCorrectionOp : public SmaOpBase {
 public:
  using SmaOpBase::SmaOpBase;

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"var", "correction"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    const Tensor& correction = vars[1];
    functor::ApplySmaCorrection<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), vars[0].flat<T>(),
        correction.flat<T>());
    MaybeForwardRef(ctx);
  }
};

template <typename T>
class ApplySmaCentralOp : public SmaOpBase {
 public:
  using SmaOpBase::SmaOpBase;

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"central", "central_prev"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    Tensor& central = vars[0];
    Tensor& central_prev = vars[1];
    tensorflow::OpInputList corrections;
    OP_REQUIRES_OK(ctx, ctx->input_list("corrections", &corrections));
    std::vector<functor::ConstFlat<T>> flats;
    flats.reserve(corrections.size());
    for (int i = 0; i < corrections.size(); ++i) {
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, central, corrections[i],
                                         "corrections"));
      flats.push_back(corrections[i].flat<T>());
    }
    const Tensor& momentum = ctx->input(2 + corrections.size());
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, momentum, "momentum"));
    functor::ApplySmaCentral<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), central.flat<T>(),
        central_prev.flat<T>(), flats, momentum.scalar<T>()());
    MaybeForwardRef(ctx);
  }
};

// Counts the replicas that have reached one variable in the current wave
// and, for the *WithCentral ops, serialises them per chunk of the variable.
class SmaBarrier : public tensorflow::ResourceBase {
 public:
  std::string DebugString() const override { return "TensorBowSmaBarrier"; }

  // Counts one arrival; true for the N-th, which also starts a new count.
  bool Arrive(int n) {
    tsl::mutex_lock lock(mu_);
    if (++count_ < n) return false;
    count_ = 0;
    started_ = 0;
    return true;
  }

  // Counts one replica starting its pass; the first of the wave runs
  // `prepare` before any other may start. A failed `prepare` counts none.
  template <typename Prepare>
  tensorflow::Status Start(const Prepare& prepare) {
    tsl::mutex_lock lock(mu_);
    if (started_ == 0) TF_RETURN_IF_ERROR(prepare());
    ++started_;
    return absl::OkStatus();
  }

  // Sizes the per-chunk state on first use; a variable keeps its size.
  tensorflow::Status UseChunks(int64_t num_chunks) {
    tsl::mutex_lock lock(mu_);
    if (chunks_ == nullptr) {
      chunks_.reset(new Chunk[num_chunks]);
      num_chunks_ = num_chunks;
    } else if (num_chunks_ != num_chunks) {
      return errors::InvalidArgument("TensorBow SMA barrier: the variable "
                                     "changed size from ", num_chunks_,
                                     " to ", num_chunks, " chunks");
    }
    return absl::OkStatus();
  }

  // Runs work(first) holding chunk k's lock, `first` for the first of the
  // n replicas of the wave to get there. Requires UseChunks.
  template <typename Work>
  void InChunk(int64_t k, int n, const Work& work) {
    Chunk& chunk = chunks_[k];
    tsl::mutex_lock lock(chunk.mu);
    work(chunk.arrivals == 0);
    if (++chunk.arrivals == n) chunk.arrivals = 0;
  }

  void Reset() {
    tsl::mutex_lock lock(mu_);
    count_ = 0;
    started_ = 0;
    for (int64_t k = 0; k < num_chunks_; ++k) {
      tsl::mutex_lock chunk_lock(chunks_[k].mu);
      chunks_[k].arrivals = 0;
    }
  }

 private:
  struct Chunk {
    tsl::mutex mu;
    int arrivals = 0;
  };

  tsl::mutex mu_;
  int count_ = 0;
  int started_ = 0;
  std::unique_ptr<Chunk[]> chunks_;
  int64_t num_chunks_ = 0;
};

constexpr char kBarrierContainer[] = "tensorbow_sma_barriers";

tensorflow::Status LookupOrCreateBarrier(OpKernelContext* ctx,
                                         const std::string& name,
                                         SmaBarrier** barrier) {
  return ctx->resource_manager()->LookupOrCreate<SmaBarrier>(
      kBarrierContainer, name, barrier, [](SmaBarrier** b) {
        *b = new SmaBarrier;
        return absl::OkStatus();
      });
}

template <typename T>
class ApplySmaCentralLeaderOp : public SmaOpBase {
 public:
  explicit ApplySmaCentralLeaderOp(OpKernelConstruction* ctx)
      : SmaOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barrier", &barrier_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    SmaBarrier* barrier = nullptr;
    OP_REQUIRES_OK(ctx, LookupOrCreateBarrier(ctx, barrier_name_, &barrier));
    tensorflow::core::ScopedUnref unref(barrier);
    if (!barrier->Arrive(n_)) return;

    // The leader: every replica has written its correction for this
    // variable, so none still reads the central model's value.
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"central", "central_prev"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    Tensor& central = vars[0];
    Tensor& central_prev = vars[1];
    std::vector<Tensor> corrections(n_);
    std::vector<functor::ConstFlat<T>> flats;
    flats.reserve(n_);
    for (int i = 0; i < n_; ++i) {
      tensorflow::core::RefCountPtr<tensorflow::Var> var;
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(
                              ctx, tensorflow::HandleFromInput(ctx, 2 + i),
                              &var));
      {
        tsl::tf_shared_lock lock(*var->mu());
        corrections[i] = *var->tensor();
      }
      OP_REQUIRES(ctx, corrections[i].dtype() == DataTypeToEnum<T>::value,
                  errors::InvalidArgument(
                      name(), ": correction ", i, " has dtype ",
                      DataTypeString(corrections[i].dtype())));
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, central, corrections[i],
                                         "corrections"));
      flats.push_back(
          const_cast<const Tensor&>(corrections[i]).flat<T>());
    }
    const Tensor& momentum = ctx->input(2 + n_);
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, momentum, "momentum"));
    functor::ApplySmaCentral<CPUDevice, T>()(
        ctx->eigen_device<CPUDevice>(), central.flat<T>(),
        central_prev.flat<T>(), flats, momentum.scalar<T>()());
  }

 private:
  std::string barrier_name_;
  int n_ = 1;
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
  if (!var->is_initialized) {
    return errors::FailedPrecondition(
        "Attempting to use uninitialized variable '", name, "' (input ",
        index, ") of ", ctx->op_kernel().name());
  }
  if (var->tensor()->dtype() != DataTypeToEnum<T>::value) {
    return errors::InvalidArgument(
        ctx->op_kernel().name(), ": variable '", name, "' has dtype ",
        DataTypeString(var->tensor()->dtype()), " but the op computes in ",
        DataTypeString(DataTypeToEnum<T>::value));
  }
  *out = *var->tensor();
  return absl::OkStatus();
}

// Elements per chunk of the *WithCentral ops: a replica holds one chunk's
// lock at a time, and replicas start at different chunks.
constexpr int64_t kChunk = 1 << 14;

// One replica's SGD or momentum step fused with its SMA correction and its
// share of the central update (functor::Apply*WithCentral). The variable is
// cut into chunks; replica r starts at chunk r * chunks / N, so concurrent
// replicas work on different chunks, and each chunk's lock orders the
// replicas that add to `next` there. The N-th replica to finish the
// variable rotates the buffers, z_prev <- z <- next <- z_prev, so the
// central update moves no data.
template <typename T, bool kMomentum>
class ApplySmaWithCentralOp : public SmaOpBase {
 public:
  explicit ApplySmaWithCentralOp(OpKernelConstruction* ctx)
      : SmaOpBase(ctx) {
    if (kMomentum) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
    }
    OP_REQUIRES_OK(ctx, ctx->GetAttr("replica", &replica_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_replicas", &num_replicas_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barrier", &barrier_name_));
    OP_REQUIRES(ctx, replica_ < num_replicas_,
                errors::InvalidArgument(
                    name(), ": replica ", replica_,
                    " is not in [0, num_replicas = ", num_replicas_, ")"));
  }

  void Compute(OpKernelContext* ctx) override {
    SmaBarrier* barrier = nullptr;
    OP_REQUIRES_OK(ctx, LookupOrCreateBarrier(ctx, barrier_name_, &barrier));
    tensorflow::core::ScopedUnref unref(barrier);
    const int central_index = kMomentum ? 2 : 1;
    OP_REQUIRES_OK(ctx, barrier->Start([&] {
      return Unshare(ctx, central_index + 2);
    }));
    {
      std::vector<Tensor> vars;
      tensorflow::Status status;
      auto locks = LockVariables<T>(
          ctx, use_exclusive_lock_,
          kMomentum ? std::vector<const char*>{"var", "accum"}
                    : std::vector<const char*>{"var"},
          &vars, &status);
      OP_REQUIRES_OK(ctx, status);
      Tensor central, central_prev, next;
      OP_REQUIRES_OK(ctx, ReadResource<T>(ctx, central_index, "central",
                                          &central));
      OP_REQUIRES_OK(ctx, ReadResource<T>(ctx, central_index + 1,
                                          "central_prev", &central_prev));
      OP_REQUIRES_OK(ctx, ReadResource<T>(ctx, central_index + 2, "next",
                                          &next));
      const Tensor& var = vars[0];
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, central, "central"));
      OP_REQUIRES_OK(ctx,
                     CheckSameShape(ctx, var, central_prev, "central_prev"));
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, next, "next"));
      const int first_value = central_index + 3;
      const Tensor& alpha = ctx->input(first_value);
      const Tensor& lr = ctx->input(first_value + 1);
      const Tensor& grad = ctx->input(first_value + 2);
      const Tensor& central_momentum = ctx->input(ctx->num_inputs() - 1);
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, var, grad,
                                         kMomentum ? "grad" : "delta"));
      OP_REQUIRES_OK(ctx, CheckScalar(ctx, alpha, "alpha"));
      OP_REQUIRES_OK(ctx, CheckScalar(ctx, lr, "lr"));
      OP_REQUIRES_OK(ctx, CheckScalar(ctx, central_momentum,
                                      "central_momentum"));
      T momentum = T(0);
      if (kMomentum) {
        const Tensor& m = ctx->input(first_value + 3);
        OP_REQUIRES_OK(ctx, CheckScalar(ctx, m, "momentum"));
        momentum = m.scalar<T>()();
      }
      const int64_t n = var.NumElements();
      const int64_t num_chunks = (n + kChunk - 1) / kChunk;
      OP_REQUIRES_OK(ctx, barrier->UseChunks(num_chunks));
      const int64_t offset = replica_ * num_chunks / num_replicas_;
      Pass pass{vars,
                central,
                central_prev,
                next,
                grad,
                alpha.scalar<T>()(),
                lr.scalar<T>()(),
                momentum,
                central_momentum.scalar<T>()(),
                use_nesterov_};
      const CPUDevice& device = ctx->eigen_device<CPUDevice>();
      device.parallelFor(
          num_chunks,
          functor::ElementCost<T>(kMomentum ? 6 : 5, kMomentum ? 3 : 2,
                                  kMomentum ? 12 : 8) *
              static_cast<double>(kChunk),
          [&](Index first, Index last) {
            for (Index i = first; i < last; ++i) {
              const int64_t k = (i + offset) % num_chunks;
              const int64_t begin = k * kChunk;
              const int64_t size = std::min(kChunk, n - begin);
              barrier->InChunk(k, num_replicas_, [&](bool is_first) {
                pass.Run(device, begin, size, is_first);
              });
            }
          });
    }
    if (barrier->Arrive(num_replicas_)) {
      OP_REQUIRES_OK(ctx, Rotate(ctx, central_index));
    }
  }

 private:
  // What one replica's pass reads and writes; Run does one chunk.
  struct Pass {
    std::vector<Tensor>& vars;  // var[, accum]
    const Tensor& central;
    const Tensor& central_prev;
    Tensor& next;
    const Tensor& grad;
    T alpha, lr, momentum, central_momentum;
    bool use_nesterov;

    template <typename Tensor_>
    static functor::Flat<T> Slice(Tensor_& t, int64_t begin, int64_t size) {
      return functor::Flat<T>(
          const_cast<T*>(t.template flat<T>().data()) + begin, size);
    }

    template <typename Tensor_>
    static functor::ConstFlat<T> ConstSlice(const Tensor_& t, int64_t begin,
                                            int64_t size) {
      return functor::ConstFlat<T>(t.template flat<T>().data() + begin, size);
    }

    void Run(const CPUDevice& d, int64_t begin, int64_t size,
             bool first) const {
      if (kMomentum) {
        functor::ApplySmaMomentumWithCentral<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), Slice(vars[1], begin, size),
            ConstSlice(central, begin, size),
            ConstSlice(central_prev, begin, size), Slice(next, begin, size),
            alpha, lr, ConstSlice(grad, begin, size), momentum,
            use_nesterov, central_momentum, first);
      } else {
        functor::ApplySmaGradientDescentWithCentral<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), ConstSlice(central, begin, size),
            ConstSlice(central_prev, begin, size), Slice(next, begin, size),
            alpha, lr, ConstSlice(grad, begin, size), central_momentum,
            first);
      }
    }
  };

  // Gives variable input `index` (`next`) a buffer of its own if it shares
  // one: with a fetched value of z from before a rotation, or with another
  // variable after an assignment (TensorFlow's variables share buffers and
  // copy on write, a copy `next`'s chunked writes cannot make). Its values
  // need not survive: the first replica at each chunk overwrites them.
  tensorflow::Status Unshare(OpKernelContext* ctx, int index) {
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    const tensorflow::Status found = tensorflow::LookupResource(
        ctx, tensorflow::HandleFromInput(ctx, index), &var);
    if (absl::IsNotFound(found)) return absl::OkStatus();  // ReadResource says
    TF_RETURN_IF_ERROR(found);
    tsl::mutex_lock lock(*var->mu());
    Tensor* next = var->tensor();
    if (!var->is_initialized || next->RefCountIsOne()) {
      return absl::OkStatus();
    }
    Tensor fresh;
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(next->dtype(), next->shape(), &fresh));
    *next = fresh;
    return absl::OkStatus();
  }

  // z_prev <- z <- next <- z_prev, under the three variables' locks: the
  // central update moves no data.
  tensorflow::Status Rotate(OpKernelContext* ctx, int central_index) {
    tensorflow::core::RefCountPtr<tensorflow::Var> vars[3];
    for (int i = 0; i < 3; ++i) {
      TF_RETURN_IF_ERROR(tensorflow::LookupResource(
          ctx, tensorflow::HandleFromInput(ctx, central_index + i),
          &vars[i]));
    }
    std::vector<tsl::mutex*> mutexes = {vars[0]->mu(), vars[1]->mu(),
                                        vars[2]->mu()};
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()),
                  mutexes.end());
    for (tsl::mutex* mu : mutexes) mu->lock();
    Tensor* z = vars[0]->tensor();
    Tensor* z_prev = vars[1]->tensor();
    Tensor* next = vars[2]->tensor();
    std::swap(*z, *next);       // z = new central, next = old z
    std::swap(*next, *z_prev);  // z_prev = old z, next = old z_prev
    for (auto it = mutexes.rbegin(); it != mutexes.rend(); ++it) {
      (*it)->unlock();
    }
    return absl::OkStatus();
  }

  bool use_nesterov_ = false;
  int replica_ = 0;
  int num_replicas_ = 1;
  std::string barrier_name_;
};

class ResetSmaBarriersOp : public OpKernel {
 public:
  explicit ResetSmaBarriersOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barriers", &names_));
  }

  void Compute(OpKernelContext* ctx) override {
    for (const std::string& name : names_) {
      SmaBarrier* barrier = nullptr;
      if (ctx->resource_manager()
              ->Lookup<SmaBarrier>(kBarrierContainer, name, &barrier)
              .ok()) {
        barrier->Reset();
        barrier->Unref();
      }
    }
  }

 private:
  std::vector<std::string> names_;
};

REGISTER_KERNEL_BUILDER(Name("TensorBowResetSmaBarriers")
                            .Device(tensorflow::DEVICE_CPU),
                        ResetSmaBarriersOp);

#define TENSORBOW_REGISTER_PAIR(op, kernel, T)                          \
  REGISTER_KERNEL_BUILDER(Name("TensorBow" op)                          \
                              .Device(tensorflow::DEVICE_CPU)           \
                              .TypeConstraint<T>("T"),                  \
                          kernel<T>);                                   \
  REGISTER_KERNEL_BUILDER(Name("TensorBowResource" op)                  \
                              .Device(tensorflow::DEVICE_CPU)           \
                              .TypeConstraint<T>("T"),                  \
                          kernel<T>);

#define TENSORBOW_REGISTER_CPU(T)                                        \
  TENSORBOW_REGISTER_PAIR("ApplySmaGradientDescent",                     \
                          ApplySmaGradientDescentOp, T)                  \
  TENSORBOW_REGISTER_PAIR("ApplySmaMomentum", ApplySmaMomentumOp, T)     \
  TENSORBOW_REGISTER_PAIR("SmaCorrection", SmaCorrectionOp, T)           \
  TENSORBOW_REGISTER_PAIR("ApplySmaCorrection", ApplySmaCorrectionOp, T) \
  REGISTER_KERNEL_BUILDER(Name("TensorBowApplySmaCentral")               \
                              .Device(tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<T>("T"),                   \
                          ApplySmaCentralOp<T>);                         \
  REGISTER_KERNEL_BUILDER(Name("TensorBowResourceApplySmaCentral")       \
                              .Device(tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<T>("T"),                   \
                          ApplySmaCentralOp<T>);                         \
  REGISTER_KERNEL_BUILDER(Name("TensorBowApplySmaCentralLeader")         \
                              .Device(tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<T>("T"),                   \
                          ApplySmaCentralLeaderOp<T>);                   \
  REGISTER_KERNEL_BUILDER(Name("TensorBowResourceApplySmaCentralLeader") \
                              .Device(tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<T>("T"),                   \
                          ApplySmaCentralLeaderOp<T>);

TENSORBOW_REGISTER_CPU(float)
TENSORBOW_REGISTER_CPU(double)

#define TENSORBOW_REGISTER_WITH_CENTRAL(T)                                 \
  REGISTER_KERNEL_BUILDER(                                                 \
      Name("TensorBowResourceApplySmaGradientDescentWithCentral")         \
          .Device(tensorflow::DEVICE_CPU)                                  \
          .TypeConstraint<T>("T"),                                         \
      ApplySmaWithCentralOp<T, false>);                                  \
  REGISTER_KERNEL_BUILDER(                                                 \
      Name("TensorBowResourceApplySmaMomentumWithCentral")                \
          .Device(tensorflow::DEVICE_CPU)                                  \
          .TypeConstraint<T>("T"),                                         \
      ApplySmaWithCentralOp<T, true>);

TENSORBOW_REGISTER_WITH_CENTRAL(float)
TENSORBOW_REGISTER_WITH_CENTRAL(double)

#undef TENSORBOW_REGISTER_WITH_CENTRAL

#undef TENSORBOW_REGISTER_CPU
#undef TENSORBOW_REGISTER_PAIR

}  // namespace
}  // namespace tensorbow
