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
#include <vector>

#include "cc/kernels/sma_kernel_util.h"
#include "cc/kernels/small_matmul.h"

namespace tensorbow {

namespace functor {

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
                    SmaStretch<T, T>(w + first, nullptr, c + first,
                                     z + first, g + first, last - first,
                                     alpha, lr, T(0), false);
                  });
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
                    SmaStretch<T, T>(w + first, a + first, c + first,
                                     z + first, g + first, last - first,
                                     alpha, lr, momentum, use_nesterov);
                  });
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
                   const T* __restrict__ z, Index n, T alpha_t) {
    const WideT<T> alpha = Widen(alpha_t);
    for (Index i = 0; i < n; ++i) {
      c[i] = static_cast<T>(
          step::Correction(Widen(w[i]), Widen(z[i]), alpha));
    }
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
    for (Index i = 0; i < n; ++i) {
      w[i] = static_cast<T>(Widen(w[i]) - Widen(c[i]));
    }
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
                   T momentum_t) {
    using W = WideT<T>;
    const W momentum = Widen(momentum_t);
    constexpr Index kBlock = 1024;
    W sum[kBlock];
    for (Index b = 0; b < n; b += kBlock) {
      const Index m = std::min(kBlock, n - b);
      const T* __restrict__ c0 = cs[0] + offset + b;
      for (Index i = 0; i < m; ++i) sum[i] = Widen(c0[i]);
      for (size_t j = 1; j < cs.size(); ++j) {
        const T* __restrict__ cj = cs[j] + offset + b;
        for (Index i = 0; i < m; ++i) sum[i] += Widen(cj[i]);
      }
      T* __restrict__ zb = z + b;
      T* __restrict__ zpb = zp + b;
      for (Index i = 0; i < m; ++i) {
        const T zi = zb[i];
        zb[i] = static_cast<T>(Widen(zi) + sum[i] +
                               momentum * (Widen(zi) - Widen(zpb[i])));
        zpb[i] = zi;
      }
    }
  }
};

}  // namespace functor

namespace {

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

// Elements of a weight gradient made at a time by the *Outer kernels: a
// stretch that stays in cache until the update has read it.
constexpr Index kOuterBlock = 1 << 14;

// ApplySmaMomentumOp (kMomentum) or ApplySmaGradientDescentOp with the
// gradient given as aᵀ·b, a dense layer's input and output gradient at a
// small batch: each stretch of whole rows of the gradient is made into a
// buffer and applied from there, so the weight-sized gradient is never
// written to memory and read back.
template <typename T, bool kMomentum>
class ApplySmaOuterOp : public SmaOpBase {
  using W = functor::WideT<T>;

 public:
  explicit ApplySmaOuterOp(OpKernelConstruction* ctx) : SmaOpBase(ctx) {
    if (kMomentum) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<const char*> names = UpdateVariableNames(kMomentum);
    names.push_back("correction");
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_, names, &vars,
                                  &status);
    OP_REQUIRES_OK(ctx, status);
    const int first = static_cast<int>(names.size());
    const Tensor& central = ctx->input(first);
    const Tensor& alpha = ctx->input(first + 1);
    const Tensor& lr = ctx->input(first + 2);
    const Tensor& a = ctx->input(first + 3);
    const Tensor& b = ctx->input(first + 4);
    OP_REQUIRES_OK(ctx, CheckSameShape(ctx, vars[0], central, "central"));
    OP_REQUIRES_OK(ctx, CheckOuterFactors(ctx, vars[0], a, b));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, alpha, "alpha"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, lr, "lr"));
    T momentum = T(0);
    if (kMomentum) {
      const Tensor& m = ctx->input(first + 5);
      OP_REQUIRES_OK(ctx, CheckScalar(ctx, m, "momentum"));
      momentum = m.scalar<T>()();
    }
    const Index depth = a.dim_size(0);
    const Index rows = a.dim_size(1);
    const Index cols = b.dim_size(1);
    if (rows * cols == 0) {
      MaybeForwardRef(ctx);
      return;
    }
    const Index block = small_matmul::RowsFor(kOuterBlock, cols);
    T* w = vars[0].flat<T>().data();
    T* acc = kMomentum ? vars[1].flat<T>().data() : nullptr;
    T* c = vars.back().flat<T>().data();
    const T* z = central.flat<T>().data();
    // The gradient is made in the step's arithmetic, from widened factors.
    std::vector<W> a_copy, b_copy;
    const W* a_data = WideFactor<T>(a, &a_copy);
    const W* b_data = WideFactor<T>(b, &b_copy);
    const T alpha_t = alpha.scalar<T>()();
    const T lr_t = lr.scalar<T>()();
    const bool nesterov = use_nesterov_;
    const Index elements = block * cols;
    const Eigen::TensorOpCost cost =
        functor::ElementCost<T>(kMomentum ? 4 : 3, kMomentum ? 3 : 2,
                                2 * static_cast<int>(depth) + 9) *
        static_cast<double>(elements);
    ctx->eigen_device<CPUDevice>().parallelFor(
        (rows + block - 1) / block, cost, [&](Index first, Index last) {
          std::vector<W> g(elements);
          for (Index i = first; i < last; ++i) {
            const Index begin = i * block;
            const Index end = std::min(rows, begin + block);
            small_matmul::OuterRows(a_data, b_data, g.data(), depth, rows,
                                    cols, begin, end);
            const Index at = begin * cols;
            functor::SmaStretch(w + at, kMomentum ? acc + at : nullptr,
                                c + at, z + at, g.data(),
                                (end - begin) * cols, alpha_t, lr_t,
                                momentum, nesterov);
          }
        });
    MaybeForwardRef(ctx);
  }

 private:
  bool use_nesterov_ = false;
};

template <typename T>
using ApplySmaGradientDescentOuterOp = ApplySmaOuterOp<T, false>;
template <typename T>
using ApplySmaMomentumOuterOp = ApplySmaOuterOp<T, true>;

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

class ResetSmaBarriersOp : public OpKernel {
 public:
  explicit ResetSmaBarriersOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barriers", &names_));
  }

  void Compute(OpKernelContext* ctx) override {
    for (const std::string& name : names_) {
      SmaBarrier* barrier = nullptr;
      if (HomeResourceManager(ctx)
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

class SetSmaParticipantsOp : public OpKernel {
 public:
  explicit SetSmaParticipantsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barriers", &names_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& count = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(count.shape()),
                errors::InvalidArgument("count must be a scalar"));
    for (const std::string& name : names_) {
      SmaBarrier* barrier = nullptr;
      OP_REQUIRES_OK(ctx, LookupOrCreateBarrier(ctx, name, &barrier));
      barrier->SetParticipants(count.scalar<int32_t>()());
      barrier->Unref();
    }
  }

 private:
  std::vector<std::string> names_;
};

REGISTER_KERNEL_BUILDER(Name("TensorBowSetSmaParticipants")
                            .Device(tensorflow::DEVICE_CPU),
                        SetSmaParticipantsOp);

#define TENSORBOW_REGISTER_CPU(T)                                          \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaGradientDescent",         \
                                 "TensorBowResourceApplySmaGradientDescent", \
                                 T, ApplySmaGradientDescentOp<T>)            \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaMomentum",                \
                                 "TensorBowResourceApplySmaMomentum", T,     \
                                 ApplySmaMomentumOp<T>)                      \
  TENSORBOW_REGISTER_KERNEL_PAIR(                                            \
      "TensorBowApplySmaGradientDescentOuter",                               \
      "TensorBowResourceApplySmaGradientDescentOuter", T,                    \
      ApplySmaGradientDescentOuterOp<T>)                                     \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaMomentumOuter",           \
                                 "TensorBowResourceApplySmaMomentumOuter",   \
                                 T, ApplySmaMomentumOuterOp<T>)              \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowSmaCorrection",                   \
                                 "TensorBowResourceSmaCorrection", T,        \
                                 SmaCorrectionOp<T>)                         \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaCorrection",              \
                                 "TensorBowResourceApplySmaCorrection", T,   \
                                 ApplySmaCorrectionOp<T>)                    \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaCentral",                 \
                                 "TensorBowResourceApplySmaCentral", T,      \
                                 ApplySmaCentralOp<T>)                       \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplySmaCentralLeader",           \
                                 "TensorBowResourceApplySmaCentralLeader",   \
                                 T, ApplySmaCentralLeaderOp<T>)

TENSORBOW_REGISTER_CPU(Eigen::half)
TENSORBOW_REGISTER_CPU(Eigen::bfloat16)
TENSORBOW_REGISTER_CPU(float)
TENSORBOW_REGISTER_CPU(double)

#undef TENSORBOW_REGISTER_CPU

}  // namespace
}  // namespace tensorbow
