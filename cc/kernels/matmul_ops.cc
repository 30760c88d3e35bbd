// CPU kernels of TensorBowMatMul and of the apply ops taking a weight's
// gradient as two factors (ops in cc/ops/matmul_ops.cc).
//
// The replicas of a small-batch model compute their dense layers with it
// (tensorbow/rewrite/kernels.py): a product with at most
// small_matmul::kMaxSmall rows, or with at most that inner dimension, runs
// the loops of small_matmul.h split over TensorFlow's intra-op pool, when
// op(b) or the product has at least `min_elements` elements; any other
// product runs TensorFlow's own MatMul kernel (the wheel's Eigen is
// built for the CPU it targets; an Eigen contraction compiled here, with
// tf.sysconfig's flags, took 2.5x as long for 64 x 3136 by 3136 x 512).
#define EIGEN_USE_THREADS

#include "cc/kernels/matmul_ops.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "cc/kernels/sma_kernel_util.h"
#include "cc/kernels/small_matmul.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorbow {

using CPUDevice = Eigen::ThreadPoolDevice;
using Eigen::Index;

namespace functor {
namespace {

// Rows of b a thread takes at least in a product with few rows.
constexpr Index kMinDepthPerPart = 256;

// The `rows` x `cols` row-major matrix `m`, transposed.
template <typename T>
std::vector<T> Transposed(const T* m, Index rows, Index cols) {
  std::vector<T> out(rows * cols);
  for (Index i = 0; i < rows; ++i) {
    for (Index j = 0; j < cols; ++j) out[j * rows + i] = m[i * cols + j];
  }
  return out;
}

}  // namespace

template <typename T>
struct MatMul<CPUDevice, T> {
  void operator()(const CPUDevice& d,
                  typename tensorflow::TTypes<T>::ConstMatrix a,
                  bool transpose_a,
                  typename tensorflow::TTypes<T>::ConstMatrix b,
                  bool transpose_b,
                  typename tensorflow::TTypes<T>::Matrix product) {
    namespace sm = small_matmul;
    const Index rows = product.dimension(0);
    const Index cols = product.dimension(1);
    const Index depth = transpose_a ? a.dimension(0) : a.dimension(1);
    if (rows == 0 || cols == 0) return;
    if (depth == 0) {
      product.device(d) = product.constant(T(0));
      return;
    }
    T* out = product.data();
    // op(a)[m, k] is a[m, k] or a[k, m].
    const sm::Left<T> left{a.data(), transpose_a ? 1 : depth,
                           transpose_a ? rows : 1};
    const double bytes = sizeof(T);
    if (rows <= sm::kMaxSmall && transpose_b) {
      // Dot products of op(a)'s rows with b's rows, one column at a time.
      std::vector<T> a_rows;
      const T* a_data = a.data();
      if (transpose_a) {
        a_rows = Transposed(a.data(), depth, rows);
        a_data = a_rows.data();
      }
      const T* b_data = b.data();
      d.parallelFor(cols,
                    Eigen::TensorOpCost(depth * bytes, rows * bytes,
                                        2.0 * rows * depth),
                    [&](Index first, Index last) {
                      sm::TransposedProduct(a_data, b_data, out, rows, depth,
                                            cols, first, last);
                    });
    } else if (rows <= sm::kMaxSmall) {
      // The inner dimension split in `parts`, each summed into a buffer of
      // its own (the first straight into the product), then added up.
      const Index parts = std::max<Index>(
          1, std::min<Index>(d.numThreads(), depth / kMinDepthPerPart));
      const Index size = rows * cols;
      std::fill(out, out + size, T(0));
      std::vector<T> partial((parts - 1) * size, T(0));
      const T* b_data = b.data();
      d.parallelFor(parts,
                    Eigen::TensorOpCost(depth * cols * bytes / parts,
                                        size * bytes,
                                        2.0 * size * depth / parts),
                    [&](Index first, Index last) {
                      for (Index p = first; p < last; ++p) {
                        T* sum = p == 0 ? out : partial.data() + (p - 1) * size;
                        sm::AccumulateProduct(left, b_data, sum, rows, cols,
                                              p * depth / parts,
                                              (p + 1) * depth / parts);
                      }
                    });
      for (Index p = 1; p < parts; ++p) {
        const T* sum = partial.data() + (p - 1) * size;
        for (Index i = 0; i < size; ++i) out[i] += sum[i];
      }
    } else {
      // Blocks of 4 rows, each a sum of `depth` (<= kMaxSmall) outer
      // products.
      std::vector<T> b_rows;
      const T* b_data = b.data();
      if (transpose_b) {
        b_rows = Transposed(b.data(), cols, depth);
        b_data = b_rows.data();
      }
      const Index blocks = (rows + 3) / 4;
      d.parallelFor(blocks,
                    Eigen::TensorOpCost(4 * depth * bytes, 4 * cols * bytes,
                                        8.0 * depth * cols),
                    [&](Index first, Index last) {
                      sm::Product(left, b_data, out, depth, cols, first * 4,
                                  std::min(rows, last * 4));
                    });
    }
  }
};

}  // namespace functor

namespace {

template <typename T>
class MatMulOp : public tensorflow::OpKernel {
 public:
  explicit MatMulOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_a", &transpose_a_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_b", &transpose_b_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_elements", &min_elements_));
    OP_REQUIRES_OK(ctx, CreateTensorFlowMatMul(ctx));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& a = ctx->input(0);
    const tensorflow::Tensor& b = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsMatrix(a.shape()),
                tensorflow::errors::InvalidArgument(
                    name(), ": 'a' must be a matrix, got shape ",
                    a.shape().DebugString()));
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsMatrix(b.shape()),
                tensorflow::errors::InvalidArgument(
                    name(), ": 'b' must be a matrix, got shape ",
                    b.shape().DebugString()));
    const int64_t rows = a.dim_size(transpose_a_ ? 1 : 0);
    const int64_t depth = a.dim_size(transpose_a_ ? 0 : 1);
    const int64_t b_depth = b.dim_size(transpose_b_ ? 1 : 0);
    const int64_t cols = b.dim_size(transpose_b_ ? 0 : 1);
    OP_REQUIRES(ctx, depth == b_depth,
                tensorflow::errors::InvalidArgument(
                    name(), ": inner dimensions differ: op(a) is [", rows,
                    ", ", depth, "] and op(b) is [", b_depth, ", ", cols,
                    "] (a ", a.shape().DebugString(), ", transpose_a=",
                    transpose_a_, "; b ", b.shape().DebugString(),
                    ", transpose_b=", transpose_b_, ")"));
    const bool small_batch = rows <= small_matmul::kMaxSmall ||
                             depth <= small_matmul::kMaxSmall;
    if (!small_batch || std::max(rows, depth) * cols < min_elements_) {
      tensorflow_matmul_->Compute(ctx);
      return;
    }
    tensorflow::Tensor* product = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({rows, cols}),
                            &product));
    functor::MatMul<CPUDevice, T>()(ctx->eigen_device<CPUDevice>(),
                                    a.matrix<T>(), transpose_a_,
                                    b.matrix<T>(), transpose_b_,
                                    product->matrix<T>());
  }

 private:
  // TensorFlow's MatMul kernel with this op's attributes, for the shapes
  // the small-batch loops do not take. It runs in this op's context: the
  // two ops have the same inputs and output.
  tensorflow::Status CreateTensorFlowMatMul(
      tensorflow::OpKernelConstruction* ctx) {
    tensorflow::NodeDef def;
    def.set_name(name() + "/tensorflow_matmul");
    def.set_op("MatMul");
    def.add_input("a");
    def.add_input("b");
    tensorflow::AddNodeAttr("T", tensorflow::DataTypeToEnum<T>::v(), &def);
    tensorflow::AddNodeAttr("transpose_a", transpose_a_, &def);
    tensorflow::AddNodeAttr("transpose_b", transpose_b_, &def);
    const tensorflow::OpDef* op_def = nullptr;
    TF_RETURN_IF_ERROR(
        tensorflow::OpRegistry::Global()->LookUpOpDef("MatMul", &op_def));
    tensorflow::AddDefaultsToNodeDef(*op_def, &def);
    tensorflow::Status status;
    tensorflow_matmul_ = tensorflow::CreateOpKernel(
        tensorflow::DEVICE_CPU, ctx->device(),
        ctx->device()->GetAllocator(tensorflow::AllocatorAttributes()), def,
        ctx->graph_def_version(), &status);
    return status;
  }

  bool transpose_a_ = false;
  bool transpose_b_ = false;
  int64_t min_elements_ = 0;
  std::unique_ptr<tensorflow::OpKernel> tensorflow_matmul_;
};

// ApplyMomentum (kMomentum) or ApplyGradientDescent on var: [k, n] with the
// gradient aᵀ·b, a: [rows, k], b: [rows, n], for ref and resource
// variables. The gradient is applied as it is made (small_matmul.h): var
// and accum are read and written once, and the [k, n] gradient is never
// written to memory and read back, which for a large weight at a small
// batch is much of a step's memory traffic.
template <typename T, bool kMomentum>
class ApplyOuterOp : public SmaOpBase {
 public:
  explicit ApplyOuterOp(tensorflow::OpKernelConstruction* ctx)
      : SmaOpBase(ctx) {
    if (kMomentum) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
    }
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace sm = small_matmul;
    constexpr int kVars = kMomentum ? 2 : 1;
    std::vector<tensorflow::Tensor> vars;
    tensorflow::Status status;
    auto locks = LockVariables<T>(ctx, use_exclusive_lock_,
                                  UpdateVariableNames(kMomentum), &vars,
                                  &status);
    OP_REQUIRES_OK(ctx, status);
    const tensorflow::Tensor& lr = ctx->input(kVars);
    const tensorflow::Tensor& a = ctx->input(kVars + 1);
    const tensorflow::Tensor& b = ctx->input(kVars + 2);
    OP_REQUIRES_OK(ctx, CheckScalar(ctx, lr, kMomentum ? "lr" : "alpha"));
    T momentum = T(0);
    if (kMomentum) {
      const tensorflow::Tensor& m = ctx->input(kVars + 3);
      OP_REQUIRES_OK(ctx, CheckScalar(ctx, m, "momentum"));
      momentum = m.scalar<T>()();
    }
    OP_REQUIRES_OK(ctx, CheckOuterFactors(ctx, vars[0], a, b));
    const Index depth = a.dim_size(0);
    const Index rows = a.dim_size(1);
    const Index cols = b.dim_size(1);
    const T step = lr.scalar<T>()();
    const bool nesterov = use_nesterov_;
    T* var = vars[0].flat<T>().data();
    T* accum = kMomentum ? vars[1].flat<T>().data() : nullptr;
    const T* a_data = a.flat<T>().data();
    const T* b_data = b.flat<T>().data();
    const double bytes = sizeof(T);
    const CPUDevice& d = ctx->eigen_device<CPUDevice>();
    // A row at a time: a row of var and accum (and of the gradient) per
    // pass over b, which stays in cache.
    d.parallelFor(rows,
                  Eigen::TensorOpCost(depth * bytes + 2 * cols * kVars * bytes,
                                      cols * kVars * bytes,
                                      2.0 * depth * cols + 4.0 * cols * kVars),
                  [&](Index first, Index last) {
                    sm::ApplyOuter(a_data, b_data, var, accum, depth, rows,
                                   cols, step, momentum, nesterov, first,
                                   last);
                  });
    MaybeForwardRef(ctx);
  }

 private:
  bool use_nesterov_ = false;
};

#define TENSORBOW_REGISTER_MATMUL(T)                          \
  REGISTER_KERNEL_BUILDER(Name("TensorBowMatMul")             \
                              .Device(tensorflow::DEVICE_CPU) \
                              .TypeConstraint<T>("T"),        \
                          MatMulOp<T>);

TENSORBOW_REGISTER_MATMUL(float)
TENSORBOW_REGISTER_MATMUL(double)

#undef TENSORBOW_REGISTER_MATMUL

#define TENSORBOW_REGISTER_OUTERS(T)                                       \
  TENSORBOW_REGISTER_KERNEL_PAIR("TensorBowApplyMomentumOuter",            \
                                 "TensorBowResourceApplyMomentumOuter", T, \
                                 ApplyOuterOp<T, true>)                    \
  TENSORBOW_REGISTER_KERNEL_PAIR(                                          \
      "TensorBowApplyGradientDescentOuter",                                \
      "TensorBowResourceApplyGradientDescentOuter", T, ApplyOuterOp<T, false>)

TENSORBOW_REGISTER_OUTERS(float)
TENSORBOW_REGISTER_OUTERS(double)

#undef TENSORBOW_REGISTER_OUTERS

}  // namespace
}  // namespace tensorbow
