// The arithmetic of one element of a replica's step, written once for every
// kernel that makes it: the SMA kernels (sma_ops.cc,
// sma_with_central_ops.cc) and the updates fused with a matrix product
// (small_matmul.cc).
//
//   Update      the optimizer's step: gradient descent, momentum, Nesterov
//   Correction  SMA's elastic pull toward the central model,
//               c = alpha * (w - z)
//   SmaElement  both on one element: w = Update(w) - c, c returned
//
// One precision policy: arithmetic is done in Wide<T> (float for Eigen::half
// and bfloat16, T itself otherwise), from widened loads, and every value is
// rounded to T once, when stored. float and double are computed in their
// own type, in TensorFlow's order of operations (training_ops.cc), so a
// step equals TensorFlow's apply op on the same gradient bit for bit.
//
// No TensorFlow and no Eigen: small_matmul.cc includes this header too.
#ifndef TENSORBOW_CC_KERNELS_SMA_STEP_H_
#define TENSORBOW_CC_KERNELS_SMA_STEP_H_

// Declared only, to name them in Wide: the kernels that instantiate the
// half-precision steps include Eigen; small_matmul.cc never does.
namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

// Always inlined: the outer-product loops call Apply on vector types from
// functions compiled for several targets (small_matmul.cc), where a call
// would pass the vectors in memory.
#define TENSORBOW_STEP_INLINE inline __attribute__((always_inline))

namespace tensorbow {
namespace step {

// The type the arithmetic of a step on T is done in.
template <typename T>
struct Wide {
  using type = T;
};
template <>
struct Wide<Eigen::half> {
  using type = float;
};
template <>
struct Wide<Eigen::bfloat16> {
  using type = float;
};
template <typename T>
using WideT = typename Wide<T>::type;

template <typename T>
inline WideT<T> Widen(T x) {
  return static_cast<WideT<T>>(x);
}

enum class Update { kGradientDescent, kMomentum, kNesterov };

// var after one step of kUpdate by `grad`; with momentum, `accum` is read
// and replaced:
//   gradient descent  var - grad * lr
//   momentum          accum = accum * momentum + grad;  var - accum * lr
//   Nesterov          accum as momentum;
//                     var - (grad * lr + accum * momentum * lr)
// V is a number or a GCC vector of them, S a number.
template <Update kUpdate, typename V, typename S>
TENSORBOW_STEP_INLINE V Apply(V var, V* accum, V grad, S lr, S momentum) {
  if constexpr (kUpdate == Update::kGradientDescent) {
    return var - grad * lr;
  } else {
    const V a = *accum * momentum + grad;
    *accum = a;
    if constexpr (kUpdate == Update::kMomentum) {
      return var - a * lr;
    } else {
      return var - (grad * lr + a * momentum * lr);
    }
  }
}

// SMA's correction of a replica's variable toward the central model.
template <typename V, typename S>
TENSORBOW_STEP_INLINE V Correction(V var, V central, S alpha) {
  return alpha * (var - central);
}

// One replica's step of kUpdate on one element with its SMA correction:
//   c = Correction(w, z);  w = Apply(w) - c
// *var (and *accum) are replaced, each rounded once; the correction is
// returned unrounded, for the caller to store or add up. `grad` is a T, or
// already Wide<T> when the caller made it (an outer product). accum may be
// null for gradient descent.
template <Update kUpdate, typename T, typename G>
TENSORBOW_STEP_INLINE WideT<T> SmaElement(T* var, T* accum, T central,
                                          G grad, WideT<T> alpha,
                                          WideT<T> lr, WideT<T> momentum) {
  using W = WideT<T>;
  const W w = Widen(*var);
  const W c = Correction(w, Widen(central), alpha);
  W a = W(0);
  if constexpr (kUpdate != Update::kGradientDescent) a = Widen(*accum);
  const W updated = Apply<kUpdate>(w, &a, static_cast<W>(grad), lr, momentum);
  if constexpr (kUpdate != Update::kGradientDescent) {
    *accum = static_cast<T>(a);
  }
  *var = static_cast<T>(updated - c);
  return c;
}

}  // namespace step
}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_SMA_STEP_H_
