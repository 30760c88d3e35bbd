// Functor of TensorBowMatMul (cc/ops/matmul_ops.cc): a matrix product whose
// CPU specialisation (matmul_ops.cc) has loops for a small batch
// (small_matmul.h). A CUDA build instantiates it for Eigen::GpuDevice in a
// .cu.cc file of its own.
#ifndef TENSORBOW_CC_KERNELS_MATMUL_OPS_H_
#define TENSORBOW_CC_KERNELS_MATMUL_OPS_H_

#include "tensorflow/core/framework/tensor_types.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tensorbow {
namespace functor {

// product = op(a) · op(b), op(x) = x, or xᵀ if its transpose flag is set,
// for a small batch: op(a) has at most small_matmul::kMaxSmall rows or
// columns (the op hands other shapes to TensorFlow's MatMul kernel).
// `product` has the product's shape and does not overlap a or b.
template <typename Device, typename T>
struct MatMul {
  void operator()(const Device& d,
                  typename tensorflow::TTypes<T>::ConstMatrix a,
                  bool transpose_a,
                  typename tensorflow::TTypes<T>::ConstMatrix b,
                  bool transpose_b,
                  typename tensorflow::TTypes<T>::Matrix product);
};

}  // namespace functor
}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_MATMUL_OPS_H_
