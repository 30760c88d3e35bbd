// Matrix products with one small dimension (a small batch), as plain loops:
// no TensorFlow, no Eigen. Used by the CPU kernel of TensorBowMatMul
// (matmul_ops.cc) for the products of a dense layer at a small batch:
//
//   y  = x · W      few rows of the product: AccumulateProduct
//   dx = dy · Wᵀ    few rows of the product: TransposedProduct
//   dW = xᵀ · dy    a small inner dimension: Product, or ApplyOuter,
//                   which applies it to the weight as it is made
//
// Each reads the large operand once and writes the product once, keeping a
// tile of the product in registers. TensorFlow's Eigen contraction, tuned
// for large products, is many times slower for the input gradient of a
// wide layer at a small batch; the other two are about even alone and
// faster in a training step (benchmarks/matmul_shapes.py, step_profile.py;
// the figures are in benchmarks/RESULTS.md). On x86-64
// each function is also compiled for AVX2 with FMA and picked at load time
// when the CPU has them.
//
// Matrices are row-major. `A` is read through strides, so a transposed
// input needs no copy: element (m, k) of the left operand op(A) is
// a[m * a_row + k * a_col].
#ifndef TENSORBOW_CC_KERNELS_SMALL_MATMUL_H_
#define TENSORBOW_CC_KERNELS_SMALL_MATMUL_H_

#include <algorithm>
#include <cstdint>

namespace tensorbow {
namespace small_matmul {

// Up to this many rows of the product (or this inner dimension) the loops
// here beat a blocked matrix product.
constexpr int64_t kMaxSmall = 16;

// Where the left operand op(A) (rows x depth) is: element (m, k) at
// data[m * row_stride + k * col_stride].
template <typename T>
struct Left {
  const T* data;
  int64_t row_stride;
  int64_t col_stride;
};

// c[m, j] = sum_k op(A)[m, k] * b[k, j] for m in [row_begin, row_end) and
// every j < cols; b is depth x cols, c is ? x cols.
void Product(Left<float> a, const float* b, float* c, int64_t depth,
             int64_t cols, int64_t row_begin, int64_t row_end);
void Product(Left<double> a, const double* b, double* c, int64_t depth,
             int64_t cols, int64_t row_begin, int64_t row_end);

// c[m, j] += sum_{k in [k_begin, k_end)} op(A)[m, k] * b[k, j] for every
// m < rows and j < cols; b is ? x cols, c is rows x cols. Reads b's rows
// whole and in order: split the inner dimension between threads, each
// summing into a buffer of its own.
void AccumulateProduct(Left<float> a, const float* b, float* c, int64_t rows,
                       int64_t cols, int64_t k_begin, int64_t k_end);
void AccumulateProduct(Left<double> a, const double* b, double* c,
                       int64_t rows, int64_t cols, int64_t k_begin,
                       int64_t k_end);

// c[m, n] = sum_k a[m, k] * b[n, k] for m < rows and n in [n_begin, n_end):
// dot products of contiguous rows. a is rows x depth (contiguous), b is
// ? x depth, c is rows x cols.
void TransposedProduct(const float* a, const float* b, float* c, int64_t rows,
                       int64_t depth, int64_t cols, int64_t n_begin,
                       int64_t n_end);
void TransposedProduct(const double* a, const double* b, double* c,
                       int64_t rows, int64_t depth, int64_t cols,
                       int64_t n_begin, int64_t n_end);

// With g = aᵀ·b (a: depth x rows, b: depth x cols), for the rows m in
// [row_begin, row_end) of var (rows x cols): with accum null
//   var[m] -= lr * g[m]                                   (gradient descent)
// otherwise accum[m] = momentum * accum[m] + g[m] and
//   var[m] -= lr * accum[m]                  (momentum; nesterov false)
//   var[m] -= lr * g[m] + lr * momentum * accum[m]        (nesterov true).
// g is never stored: each tile is applied as it is summed.
void ApplyOuter(const float* a, const float* b, float* var, float* accum,
                int64_t depth, int64_t rows, int64_t cols, float lr,
                float momentum, bool nesterov, int64_t row_begin,
                int64_t row_end);
void ApplyOuter(const double* a, const double* b, double* var, double* accum,
                int64_t depth, int64_t rows, int64_t cols, double lr,
                double momentum, bool nesterov, int64_t row_begin,
                int64_t row_end);

// Rows [row_begin, row_end) of g = aᵀ·b (a: depth x rows, b: depth x
// cols) into `out`, from its first row: the weight gradient of a dense
// layer a stretch at a time, for an update that reads it from cache.
template <typename T>
inline void OuterRows(const T* a, const T* b, T* out, int64_t depth,
                      int64_t rows, int64_t cols, int64_t row_begin,
                      int64_t row_end) {
  Product(Left<T>{a + row_begin, 1, rows}, b, out, depth, cols, 0,
          row_end - row_begin);
}

// How many whole rows of a `cols`-wide matrix make about `elements`
// elements (at least one row).
inline int64_t RowsFor(int64_t elements, int64_t cols) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(1, cols));
}

}  // namespace small_matmul
}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_SMALL_MATMUL_H_
