// Functors for synchronous model averaging (SMA).
//
// Each functor does one pass over the memory of one variable. The CPU
// specialisations live in sma_ops.cc; a CUDA build instantiates the same
// templates for Eigen::GpuDevice in a .cu.cc file of its own.
//
// Notation (DESIGN.md, "Synchronous model averaging"): w is a replica's copy
// of a model variable, z the central model, alpha the correction factor, c
// the correction. The arithmetic of one element, and its precision, is
// sma_step.h's.
#ifndef TENSORBOW_CC_KERNELS_SMA_OPS_H_
#define TENSORBOW_CC_KERNELS_SMA_OPS_H_

#include <vector>

#include "tensorflow/core/framework/tensor_types.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tensorbow {
namespace functor {

template <typename T>
using Flat = typename tensorflow::TTypes<T>::Flat;
template <typename T>
using ConstFlat = typename tensorflow::TTypes<T>::ConstFlat;

// c = alpha * (w - z);  correction = c;  w = w - lr * delta - c
template <typename Device, typename T>
struct ApplySmaGradientDescent {
  void operator()(const Device& d, Flat<T> var, Flat<T> correction,
                  ConstFlat<T> central, T alpha, T lr, ConstFlat<T> delta);
};

// c = alpha * (w - z);  correction = c;  accum = momentum * accum + grad;
// w = w - lr * accum - c                              (use_nesterov = false)
// w = w - lr * grad - lr * momentum * accum - c       (use_nesterov = true)
template <typename Device, typename T>
struct ApplySmaMomentum {
  void operator()(const Device& d, Flat<T> var, Flat<T> accum,
                  Flat<T> correction, ConstFlat<T> central, T alpha, T lr,
                  ConstFlat<T> grad, T momentum, bool use_nesterov);
};

// correction = alpha * (w - z)   (before any optimizer's apply op)
template <typename Device, typename T>
struct SmaCorrection {
  void operator()(const Device& d, ConstFlat<T> var, Flat<T> correction,
                  ConstFlat<T> central, T alpha);
};

// w = w - correction   (after that optimizer's apply op)
template <typename Device, typename T>
struct ApplySmaCorrection {
  void operator()(const Device& d, Flat<T> var, ConstFlat<T> correction);
};

// z_new = z + sum_j c_j + momentum * (z - z_prev);  z_prev = z;  z = z_new
template <typename Device, typename T>
struct ApplySmaCentral {
  void operator()(const Device& d, Flat<T> central, Flat<T> central_prev,
                  const std::vector<ConstFlat<T>>& corrections, T momentum);
};

// One stretch of a replica's step fused with its share of the central
// update, for the replica whose correction is next in replica order: the
// wave's new central model is summed in `next`.
//   c = alpha * (w - z);  w = w - lr * delta - c
//   next = z + central_momentum * (z - z_prev) + c    (first)
//   next = next + c                                   (every later replica)
template <typename Device, typename T>
struct ApplySmaGradientDescentWithCentral {
  void operator()(const Device& d, Flat<T> var, ConstFlat<T> central,
                  ConstFlat<T> central_prev, Flat<T> next, T alpha, T lr,
                  ConstFlat<T> delta, T central_momentum, bool first);
};

// As ApplySmaGradientDescentWithCentral, with ApplySmaMomentum's step.
template <typename Device, typename T>
struct ApplySmaMomentumWithCentral {
  void operator()(const Device& d, Flat<T> var, Flat<T> accum,
                  ConstFlat<T> central, ConstFlat<T> central_prev,
                  Flat<T> next, T alpha, T lr, ConstFlat<T> grad, T momentum,
                  bool use_nesterov, T central_momentum, bool first);
};

// The same steps for a replica that is ahead of its turn: its correction
// is kept, and added to `next` by AddSmaCorrection when its turn comes.
//   c = alpha * (w - z);  correction = c;  w = w - lr * delta - c
template <typename Device, typename T>
struct ApplySmaGradientDescentDeferred {
  void operator()(const Device& d, Flat<T> var, ConstFlat<T> central,
                  Flat<T> correction, T alpha, T lr, ConstFlat<T> delta);
};

template <typename Device, typename T>
struct ApplySmaMomentumDeferred {
  void operator()(const Device& d, Flat<T> var, Flat<T> accum,
                  ConstFlat<T> central, Flat<T> correction, T alpha, T lr,
                  ConstFlat<T> grad, T momentum, bool use_nesterov);
};

// A kept correction's turn, with the arithmetic of the fused steps':
//   next = z + central_momentum * (z - z_prev) + c    (first)
//   next = next + c                                   (otherwise)
template <typename Device, typename T>
struct AddSmaCorrection {
  void operator()(const Device& d, Flat<T> next, ConstFlat<T> central,
                  ConstFlat<T> central_prev, ConstFlat<T> correction,
                  T central_momentum, bool first);
};

}  // namespace functor
}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_SMA_OPS_H_
