// CPU kernels of the SMA ops fused with the central update
// (TensorBow{,Resource}ApplySma{GradientDescent,Momentum}[Outer]WithCentral;
// ops in cc/ops/sma_ops.cc), and of the sum across devices' central copies.
// The replicas' corrections are added to the wave's next central model
// chunk by chunk in replica order, whatever order the replicas run in: a
// replica whose turn it is adds its correction as it steps; one ahead of
// its turn keeps it until then. The last replica of the wave rotates the
// buffers.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cc/kernels/sma_kernel_util.h"
#include "cc/kernels/sma_ops.h"
#include "cc/kernels/small_matmul.h"

namespace tensorbow {
namespace functor {

// The *WithCentral functors run on one chunk of a variable, on the calling
// thread: the kernel spreads the chunks over the pool (see
// ApplySmaWithCentralOp). The fused and the kept paths round alike: the
// correction is of type T (WideT<T> is T for float and double) before it
// is added, and the build does not contract multiply-adds.

// next = z + mu * (z - z_prev) + c  (first)  or  next += c.
template <typename T, bool kFirst>
inline void AddToNext(T* __restrict__ next, const T* __restrict__ z,
                      const T* __restrict__ zp, Index i, T ci, WideT<T> mu) {
  if (kFirst) {
    const WideT<T> zi = Widen(z[i]);
    next[i] = static_cast<T>(zi + mu * (zi - Widen(zp[i])) + Widen(ci));
  } else {
    next[i] = static_cast<T>(Widen(next[i]) + Widen(ci));
  }
}

// Elements [0, n) of one replica's step of kUpdate with its SMA correction
// (step::SmaElement), the correction added to next; `a` is unused for
// gradient descent.
template <step::Update kUpdate, bool kFirst, typename T>
void SmaStretchWithCentral(T* __restrict__ w, T* __restrict__ a,
                           const T* __restrict__ z, const T* __restrict__ zp,
                           T* __restrict__ next, const T* __restrict__ g,
                           Index n, T alpha_t, T lr_t, T momentum_t, T mu_t) {
  constexpr bool kAccum = kUpdate != step::Update::kGradientDescent;
  const WideT<T> alpha = Widen(alpha_t), lr = Widen(lr_t);
  const WideT<T> momentum = Widen(momentum_t), mu = Widen(mu_t);
  for (Index i = 0; i < n; ++i) {
    const T ci = static_cast<T>(step::SmaElement<kUpdate>(
        w + i, kAccum ? a + i : nullptr, z[i], g[i], alpha, lr, momentum));
    AddToNext<T, kFirst>(next, z, zp, i, ci, mu);
  }
}

// Elements [0, n) of one replica's step of kUpdate alone, rounded as
// SmaStretchWithCentral rounds it: a wave with neither a pull toward the
// central model nor a central momentum leaves the central model as it is,
// and reads and writes none of its buffers. `a` is unused for gradient
// descent.
template <step::Update kUpdate, typename T>
void StepStretch(T* __restrict__ w, T* __restrict__ a,
                 const T* __restrict__ g, Index n, T lr_t, T momentum_t) {
  constexpr bool kAccum = kUpdate != step::Update::kGradientDescent;
  const WideT<T> lr = Widen(lr_t), momentum = Widen(momentum_t);
  for (Index i = 0; i < n; ++i) {
    WideT<T> ai = kAccum ? Widen(a[i]) : WideT<T>(0);
    const WideT<T> wi = step::Apply<kUpdate>(Widen(w[i]), &ai,
                                             static_cast<WideT<T>>(g[i]), lr,
                                             momentum);
    if (kAccum) a[i] = static_cast<T>(ai);
    w[i] = static_cast<T>(wi);
  }
}

// Without a central momentum z_prev's values are multiplied by zero: z
// stands in for them, so that a first pass over a chunk reads one buffer
// fewer. The sum differs only in the sign of a zero.
template <typename T>
const T* PrevOrCentral(const T* central, const T* central_prev,
                       T central_momentum) {
  return central_momentum == T(0) ? central : central_prev;
}

template <typename T>
struct ApplySmaGradientDescentWithCentral<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, ConstFlat<T> central,
                  ConstFlat<T> central_prev, Flat<T> next, T alpha, T lr,
                  ConstFlat<T> delta, T central_momentum, bool first) {
    constexpr auto kUpdate = step::Update::kGradientDescent;
    auto stretch = first ? &SmaStretchWithCentral<kUpdate, true, T>
                         : &SmaStretchWithCentral<kUpdate, false, T>;
    stretch(var.data(), nullptr, central.data(),
            PrevOrCentral(central.data(), central_prev.data(),
                          central_momentum),
            next.data(), delta.data(), var.size(), alpha, lr, T(0),
            central_momentum);
  }
};

template <typename T>
struct ApplySmaMomentumWithCentral<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, Flat<T> accum,
                  ConstFlat<T> central, ConstFlat<T> central_prev,
                  Flat<T> next, T alpha, T lr, ConstFlat<T> grad, T momentum,
                  bool use_nesterov, T central_momentum, bool first) {
    using step::Update;
    auto stretch =
        first ? (use_nesterov
                     ? &SmaStretchWithCentral<Update::kNesterov, true, T>
                     : &SmaStretchWithCentral<Update::kMomentum, true, T>)
              : (use_nesterov
                     ? &SmaStretchWithCentral<Update::kNesterov, false, T>
                     : &SmaStretchWithCentral<Update::kMomentum, false, T>);
    stretch(var.data(), accum.data(), central.data(),
            PrevOrCentral(central.data(), central_prev.data(),
                          central_momentum),
            next.data(), grad.data(), var.size(), alpha, lr, momentum,
            central_momentum);
  }
};

template <typename T>
struct ApplySmaGradientDescentDeferred<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, ConstFlat<T> central,
                  Flat<T> correction, T alpha, T lr, ConstFlat<T> delta) {
    SmaStretch<T, T>(var.data(), nullptr, correction.data(), central.data(),
                     delta.data(), var.size(), alpha, lr, T(0), false);
  }
};

template <typename T>
struct ApplySmaMomentumDeferred<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> var, Flat<T> accum,
                  ConstFlat<T> central, Flat<T> correction, T alpha, T lr,
                  ConstFlat<T> grad, T momentum, bool use_nesterov) {
    SmaStretch<T, T>(var.data(), accum.data(), correction.data(),
                     central.data(), grad.data(), var.size(), alpha, lr,
                     momentum, use_nesterov);
  }
};

template <typename T>
struct AddSmaCorrection<CPUDevice, T> {
  void operator()(const CPUDevice& d, Flat<T> next, ConstFlat<T> central,
                  ConstFlat<T> central_prev, ConstFlat<T> correction,
                  T central_momentum, bool first) {
    T* out = next.data();
    const T* z = central.data();
    const T* zp = PrevOrCentral(z, central_prev.data(), central_momentum);
    const T* c = correction.data();
    const WideT<T> mu = Widen(central_momentum);
    const Index n = next.size();
    if (first) {
      for (Index i = 0; i < n; ++i) AddToNext<T, true>(out, z, zp, i, c[i], mu);
    } else {
      for (Index i = 0; i < n; ++i) {
        AddToNext<T, false>(out, z, zp, i, c[i], mu);
      }
    }
  }
};

}  // namespace functor

namespace {

// Elements per chunk of the *WithCentral ops: the unit in which the
// corrections are added in order, and replicas start at different chunks.
constexpr int64_t kChunk = 1 << 14;

// The tensor of the central model's input `index`: a reference variable's
// or a resource variable's, checked to be initialised and of dtype T.
template <typename T>
tensorflow::Status ReadCentral(OpKernelContext* ctx, int index,
                               Tensor* out) {
  if (ctx->input_dtype(index) == DT_RESOURCE) {
    return ReadResource<T>(ctx, index, "central", out);
  }
  *out = ctx->mutable_input(index, /*lock_held=*/false);
  return CheckVariable<T>(ctx, index, "central", out->IsInitialized(),
                          out->dtype());
}

// One replica's SGD or momentum step fused with its SMA correction and its
// share of the central update (functor::Apply*WithCentral). The variable is
// cut into chunks; replica r starts at chunk r * chunks / N, so concurrent
// replicas work on different chunks. At each chunk the corrections go into
// `next` in slot order (SmaBarrier::AtChunk), so the new central model
// does not depend on the order the replicas run in. The last replica of
// the wave rotates the buffers, z_prev <- z <- next <- z_prev, so the
// central update moves no data. With kOuter the gradient comes as aᵀ·b (a
// dense layer's input and output gradient): chunks are whole rows, and each
// chunk's rows of the gradient are made into a buffer and applied from
// there.
template <typename T, bool kMomentum, bool kOuter>
class ApplySmaWithCentralOp : public SmaOpBase {
 public:
  explicit ApplySmaWithCentralOp(OpKernelConstruction* ctx)
      : SmaOpBase(ctx) {
    if (kMomentum) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
    }
    OP_REQUIRES_OK(ctx, ctx->GetAttr("replica", &replica_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_replicas", &num_replicas_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("first_replica", &first_replica_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("barrier", &barrier_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stagger", &stagger_));
    if (stagger_ == 0) stagger_ = num_replicas_;
    OP_REQUIRES(ctx, replica_ < stagger_,
                errors::InvalidArgument(
                    name(), ": replica ", replica_, " is not in [0, ",
                    stagger_, ")"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& index = ctx->input(ctx->num_inputs() - 1);
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, index, "replica_index"));
    const int slot = index.scalar<int32_t>()() - first_replica_;
    OP_REQUIRES(ctx, slot >= 0 && slot < num_replicas_,
                errors::InvalidArgument(
                    name(), ": replica_index ", index.scalar<int32_t>()(),
                    " is not in [", first_replica_, ", ",
                    first_replica_ + num_replicas_, ")"));
    SmaBarrier* barrier = nullptr;
    OP_REQUIRES_OK(ctx, LookupOrCreateBarrier(ctx, barrier_name_, &barrier));
    tensorflow::core::ScopedUnref unref(barrier);
    const int central_index = kMomentum ? 2 : 1;
    OP_REQUIRES_OK(ctx, barrier->StartSlot(slot, [&] {
      return Unshare(ctx, central_index + 2);
    }));
    bool still = false;
    const tensorflow::Status passed = Update(ctx, barrier, slot,
                                             central_index, &still);
    if (!passed.ok()) {
      barrier->Abandon(slot);
      ctx->SetStatus(passed);
      return;
    }
    if (barrier->Arrive(num_replicas_) && !still) {
      OP_REQUIRES_OK(ctx, Rotate(ctx, central_index));
    }
    MaybeForwardRef(ctx);
  }

 private:
  // The replica's pass over the variable; an error comes before anything
  // is written. *still: the wave has neither a pull toward the central
  // model (alpha 0, EASGD between its exchanges) nor a central momentum,
  // so the central model stays as it is: the pass is the optimizer's step
  // alone and the wave's last replica rotates nothing. Every replica of a
  // wave reads the same alpha and momentum, so all of them pass alike.
  tensorflow::Status Update(OpKernelContext* ctx, SmaBarrier* barrier,
                            int slot, int central_index, bool* still) {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  UpdateVariableNames(kMomentum), &vars,
                                  &status);
    TF_RETURN_IF_ERROR(status);
    Tensor central, central_prev, next;
    TF_RETURN_IF_ERROR(ReadCentral<T>(ctx, central_index, &central));
    TF_RETURN_IF_ERROR(ReadResource<T>(ctx, central_index + 1,
                                       "central_prev", &central_prev));
    TF_RETURN_IF_ERROR(ReadResource<T>(ctx, central_index + 2, "next",
                                       &next));
    const Tensor& var = vars[0];
    TF_RETURN_IF_ERROR(CheckSameShape(ctx, var, central, "central"));
    TF_RETURN_IF_ERROR(CheckSameShape(ctx, var, central_prev,
                                      "central_prev"));
    TF_RETURN_IF_ERROR(CheckSameShape(ctx, var, next, "next"));
    const int first_value = central_index + 3;
    const Tensor& alpha = ctx->input(first_value);
    const Tensor& lr = ctx->input(first_value + 1);
    // The gradient, or with kOuter its factors a (here) and b.
    const Tensor& grad = ctx->input(first_value + 2);
    const Tensor& factor_b = ctx->input(first_value + (kOuter ? 3 : 2));
    const Tensor& central_momentum = ctx->input(ctx->num_inputs() - 2);
    TF_RETURN_IF_ERROR(kOuter ? CheckOuterFactors(ctx, var, grad, factor_b)
                              : CheckSameShape(ctx, var, grad,
                                               kMomentum ? "grad" : "delta"));
    TF_RETURN_IF_ERROR(CheckScalar(ctx, alpha, "alpha"));
    TF_RETURN_IF_ERROR(CheckScalar(ctx, lr, "lr"));
    TF_RETURN_IF_ERROR(CheckScalar(ctx, central_momentum,
                                   "central_momentum"));
    T momentum = T(0);
    if (kMomentum) {
      const Tensor& m = ctx->input(first_value + (kOuter ? 4 : 3));
      TF_RETURN_IF_ERROR(CheckScalar(ctx, m, "momentum"));
      momentum = m.scalar<T>()();
    }
    const int64_t n = var.NumElements();
    // With kOuter var is rows x cols, and a and b have depth rows.
    const int64_t depth = kOuter ? grad.dim_size(0) : 0;
    const int64_t rows = kOuter ? grad.dim_size(1) : n;
    const int64_t cols = kOuter ? std::max<int64_t>(1, factor_b.dim_size(1))
                                : 1;
    const int64_t chunk =
        kOuter ? cols * small_matmul::RowsFor(kChunk, cols) : kChunk;
    const int64_t num_chunks = (n + chunk - 1) / chunk;
    TF_RETURN_IF_ERROR(barrier->UseChunks(ctx, num_chunks, num_replicas_,
                                          DataTypeToEnum<T>::value,
                                          var.shape()));
    const int64_t offset = replica_ * num_chunks / stagger_;
    *still = alpha.scalar<T>()() == T(0) &&
             central_momentum.scalar<T>()() == T(0);
    Pass pass{vars,
              central,
              central_prev,
              next,
              barrier->Slot(slot),
              alpha.scalar<T>()(),
              lr.scalar<T>()(),
              momentum,
              central_momentum.scalar<T>()(),
              use_nesterov_};
    const CPUDevice& device = ctx->eigen_device<CPUDevice>();
    const int participants = barrier->Participants(num_replicas_);
    device.parallelFor(
        num_chunks,
        functor::ElementCost<T>(kMomentum ? 6 : 5, kMomentum ? 3 : 2,
                                (kMomentum ? 12 : 8) + 2 * depth) *
            static_cast<double>(chunk),
        [&](Index first, Index last) {
          std::vector<T> made(kOuter ? chunk : 0);
          for (Index i = first; i < last; ++i) {
            const int64_t k = (i + offset) % num_chunks;
            const int64_t begin = k * chunk;
            const int64_t size = std::min(chunk, n - begin);
            const T* g = grad.flat<T>().data() + begin;
            if (kOuter) {
              const int64_t row = begin / cols;
              small_matmul::OuterRows(grad.flat<T>().data(),
                                      factor_b.flat<T>().data(), made.data(),
                                      depth, rows, cols, row,
                                      row + size / cols);
              g = made.data();
            }
            if (*still) {
              pass.Step(begin, size, g);
              continue;
            }
            barrier->AtChunk(
                k, slot, participants,
                [&](bool first) { pass.Fused(device, begin, size, g, first); },
                [&] { pass.Deferred(device, begin, size, g); },
                [&](int other, bool first) {
                  pass.Add(device, begin, size, barrier->Slot(other), first);
                });
          }
        });
    return absl::OkStatus();
  }

  // What one replica's pass reads and writes; Step and Sum do one chunk.
  struct Pass {
    std::vector<Tensor>& vars;  // var[, accum]
    const Tensor& central;
    const Tensor& central_prev;
    Tensor& next;
    Tensor& correction;  // this replica's slot
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

    // The replica's step with its correction added to next (its turn);
    // `grad`: the chunk's gradient, from its first element.
    void Fused(const CPUDevice& d, int64_t begin, int64_t size,
               const T* grad, bool first) const {
      const functor::ConstFlat<T> g(grad, size);
      if (kMomentum) {
        functor::ApplySmaMomentumWithCentral<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), Slice(vars[1], begin, size),
            ConstSlice(central, begin, size),
            ConstSlice(central_prev, begin, size), Slice(next, begin, size),
            alpha, lr, g, momentum, use_nesterov, central_momentum, first);
      } else {
        functor::ApplySmaGradientDescentWithCentral<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), ConstSlice(central, begin, size),
            ConstSlice(central_prev, begin, size), Slice(next, begin, size),
            alpha, lr, g, central_momentum, first);
      }
    }

    // The replica's step alone (a still wave).
    void Step(int64_t begin, int64_t size, const T* grad) const {
      T* w = Slice(vars[0], begin, size).data();
      if (!kMomentum) {
        functor::StepStretch<step::Update::kGradientDescent>(
            w, static_cast<T*>(nullptr), grad, size, lr, T(0));
        return;
      }
      T* a = Slice(vars[1], begin, size).data();
      if (use_nesterov) {
        functor::StepStretch<step::Update::kNesterov>(w, a, grad, size, lr,
                                                      momentum);
      } else {
        functor::StepStretch<step::Update::kMomentum>(w, a, grad, size, lr,
                                                      momentum);
      }
    }

    // The replica's step with its correction kept in its slot (ahead of
    // its turn).
    void Deferred(const CPUDevice& d, int64_t begin, int64_t size,
                  const T* grad) const {
      const functor::ConstFlat<T> g(grad, size);
      if (kMomentum) {
        functor::ApplySmaMomentumDeferred<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), Slice(vars[1], begin, size),
            ConstSlice(central, begin, size),
            Slice(correction, begin, size), alpha, lr, g, momentum,
            use_nesterov);
      } else {
        functor::ApplySmaGradientDescentDeferred<CPUDevice, T>()(
            d, Slice(vars[0], begin, size), ConstSlice(central, begin, size),
            Slice(correction, begin, size), alpha, lr, g);
      }
    }

    // A kept correction's turn.
    void Add(const CPUDevice& d, int64_t begin, int64_t size,
             const Tensor& kept, bool first) const {
      functor::AddSmaCorrection<CPUDevice, T>()(
          d, Slice(next, begin, size), ConstSlice(central, begin, size),
          ConstSlice(central_prev, begin, size), ConstSlice(kept, begin, size),
          central_momentum, first);
    }
  };

  // Gives variable input `index` (`next`) a buffer of its own if it shares
  // one: with a fetched value of z from before a rotation, or with another
  // variable after an assignment (TensorFlow's variables share buffers and
  // copy on write, a copy `next`'s chunked writes cannot make). Its values
  // need not survive: every chunk is written whole before it is read.
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
  // central update moves no data. A reference variable's z takes next's
  // buffer as an assignment does.
  tensorflow::Status Rotate(OpKernelContext* ctx, int central_index) {
    const bool ref = ctx->input_dtype(central_index) != DT_RESOURCE;
    tensorflow::core::RefCountPtr<tensorflow::Var> vars[3];
    for (int i = ref ? 1 : 0; i < 3; ++i) {
      TF_RETURN_IF_ERROR(tensorflow::LookupResource(
          ctx, tensorflow::HandleFromInput(ctx, central_index + i),
          &vars[i]));
    }
    std::vector<tsl::mutex*> mutexes = {
        ref ? ctx->input_ref_mutex(central_index) : vars[0]->mu(),
        vars[1]->mu(), vars[2]->mu()};
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()),
                  mutexes.end());
    for (tsl::mutex* mu : mutexes) mu->lock();
    Tensor* z_prev = vars[1]->tensor();
    Tensor* next = vars[2]->tensor();
    const Tensor z = ref ? ctx->mutable_input(central_index, true)
                         : *vars[0]->tensor();
    if (ref) {
      ctx->replace_ref_input(central_index, *next, /*lock_held=*/true);
    } else {
      *vars[0]->tensor() = *next;
    }
    *next = *z_prev;
    *z_prev = z;
    for (auto it = mutexes.rbegin(); it != mutexes.rend(); ++it) {
      (*it)->unlock();
    }
    return absl::OkStatus();
  }

  bool use_nesterov_ = false;
  int replica_ = 0;
  int num_replicas_ = 1;
  int first_replica_ = 0;
  int stagger_ = 0;
  std::string barrier_name_;
};

// TensorBow{,Resource}SumDeviceCopies: the second level of SMA over several
// devices, in one pass over the elements. A copy's buffer is written in
// place unless something else holds it (a read of the previous wave): then
// the copy gets a new one.
template <typename T>
class SumDeviceCopiesOp : public SmaOpBase {
 public:
  using SmaOpBase::SmaOpBase;

  void Compute(OpKernelContext* ctx) override {
    std::vector<Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  {"central", "central_prev"}, &vars, &status);
    OP_REQUIRES_OK(ctx, status);
    T* z = vars[0].flat<T>().data();
    T* zp = vars[1].flat<T>().data();
    const int n = ctx->num_inputs() - 3;
    const Tensor& momentum = ctx->input(2 + n);
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, momentum, "momentum"));
    // Only this op and the seeding write the copies, never at once with a
    // wave; their locks are held all the same.
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> copies(n);
    std::vector<std::unique_ptr<tsl::mutex_lock>> held;
    std::vector<Tensor> sources(n);  // the values read, kept alive
    std::vector<const T*> from(n);
    std::vector<T*> targets(n);
    for (int d = 0; d < n; ++d) {
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(
                              ctx, tensorflow::HandleFromInput(ctx, 2 + d),
                              &copies[d]));
      held.push_back(std::make_unique<tsl::mutex_lock>(*copies[d]->mu()));
      Tensor* copy = copies[d]->tensor();
      OP_REQUIRES_OK(ctx, CheckVariable<T>(ctx, 2 + d, "copies",
                                           copies[d]->is_initialized,
                                           copy->dtype()));
      OP_REQUIRES_OK(ctx, CheckSameShape(ctx, vars[0], *copy, "copies"));
      const bool shared = !copy->RefCountIsOne();  // before sources holds it
      sources[d] = *copy;
      from[d] = sources[d].flat<T>().data();
      if (shared) {
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(copy->dtype(), copy->shape(),
                                               copy));
      }
      targets[d] = copy->flat<T>().data();
    }
    using W = functor::WideT<T>;
    const W mu = functor::Widen(momentum.scalar<T>()());
    ctx->eigen_device<CPUDevice>().parallelFor(
        vars[0].NumElements(), functor::ElementCost<T>(2 + n, 2 + n, 4 + 2 * n),
        [&](Index first, Index last) {
          for (Index i = first; i < last; ++i) {
            const W zi = functor::Widen(z[i]);
            const W base = zi + mu * (zi - functor::Widen(zp[i]));
            W sum = base;
            for (int d = 0; d < n; ++d) sum += functor::Widen(from[d][i]) - base;
            const T out = static_cast<T>(sum);
            zp[i] = z[i];
            z[i] = out;
            for (int d = 0; d < n; ++d) targets[d][i] = out;
          }
        });
    MaybeForwardRef(ctx);
  }
};

#define TENSORBOW_REGISTER_SUM(T)                                         \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowSumDeviceCopies",              \
                                 "TensorBowResourceSumDeviceCopies", T,   \
                                 SumDeviceCopiesOp<T>)
TENSORBOW_REGISTER_SUM(Eigen::half)
TENSORBOW_REGISTER_SUM(Eigen::bfloat16)
TENSORBOW_REGISTER_SUM(float)
TENSORBOW_REGISTER_SUM(double)
#undef TENSORBOW_REGISTER_SUM

// The replica's variables and the central model by reference or handle;
// the central model's buffers are rotated by swapping.
#define TENSORBOW_REGISTER_WITH_CENTRAL(op, T, kMomentum, kOuter)           \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApply" op "WithCentral",          \
                                 "TensorBowResourceApply" op "WithCentral", \
                                 T,                                          \
                                 (ApplySmaWithCentralOp<T, kMomentum, kOuter>))
#define TENSORBOW_REGISTER_CPU(T)                                          \
  TENSORBOW_REGISTER_WITH_CENTRAL("SmaGradientDescent", T, false, false)   \
  TENSORBOW_REGISTER_WITH_CENTRAL("SmaMomentum", T, true, false)           \
  TENSORBOW_REGISTER_WITH_CENTRAL("SmaGradientDescentOuter", T, false, true) \
  TENSORBOW_REGISTER_WITH_CENTRAL("SmaMomentumOuter", T, true, true)

TENSORBOW_REGISTER_CPU(float)
TENSORBOW_REGISTER_CPU(double)

#undef TENSORBOW_REGISTER_CPU
#undef TENSORBOW_REGISTER_WITH_CENTRAL

}  // namespace
}  // namespace tensorbow
