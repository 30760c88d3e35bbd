// Loops of small_matmul.h. A tile of the product (up to 4 rows by 64 bytes
// of columns) is summed in local arrays that the compiler keeps in vector
// registers, over the whole inner dimension, then stored once.
#include "cc/kernels/small_matmul.h"

#include <algorithm>
#include <cstring>

#include "cc/kernels/sma_step.h"

#if defined(__x86_64__) && defined(__GNUC__)
// One copy for AVX2 + FMA, one for the baseline; the loader picks.
#define TENSORBOW_CLONES \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TENSORBOW_CLONES
#endif
#define TENSORBOW_INLINE inline __attribute__((always_inline))

// Vectors are passed only between these always-inlined helpers, so the
// note that their calling convention differs without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensorbow {
namespace small_matmul {
namespace {

// A vector of 32 bytes (one AVX2 register, two SSE ones); a tile's columns
// are two vectors.
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
constexpr int64_t kLanes = 32 / sizeof(T);
// Columns of the product a tile covers: two vectors, 64 bytes.
template <typename T>
constexpr int64_t kTile = 2 * kLanes<T>;

template <typename T>
TENSORBOW_INLINE Vec<T> Load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
TENSORBOW_INLINE void Store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof(v));
}

// c[m, 0:width] = sum_k op(A)[m, k] * b[k, 0:width] (+= with kAccumulate),
// m < kRows; a points at op(A)'s first row of the tile, b and c at the
// tile's first column.
template <typename T, int kRows, bool kAccumulate>
TENSORBOW_INLINE void Tile(Left<T> a, const T* b, T* c, int64_t depth,
                           int64_t cols, int64_t width) {
  if (width < kTile<T>) {
    T acc[kRows][kTile<T>] = {};
    for (int64_t k = 0; k < depth; ++k) {
      const T* bk = b + k * cols;
      for (int m = 0; m < kRows; ++m) {
        const T amk = a.data[m * a.row_stride + k * a.col_stride];
        for (int64_t l = 0; l < width; ++l) acc[m][l] += amk * bk[l];
      }
    }
    for (int m = 0; m < kRows; ++m) {
      for (int64_t l = 0; l < width; ++l) {
        c[m * cols + l] = kAccumulate ? c[m * cols + l] + acc[m][l] : acc[m][l];
      }
    }
    return;
  }
  Vec<T> acc[kRows][2] = {};
  if constexpr (kAccumulate) {
    for (int m = 0; m < kRows; ++m) {
      acc[m][0] = Load(c + m * cols);
      acc[m][1] = Load(c + m * cols + kLanes<T>);
    }
  }
  for (int64_t k = 0; k < depth; ++k) {
    const Vec<T> b0 = Load(b + k * cols);
    const Vec<T> b1 = Load(b + k * cols + kLanes<T>);
    for (int m = 0; m < kRows; ++m) {
      const T amk = a.data[m * a.row_stride + k * a.col_stride];
      acc[m][0] += amk * b0;
      acc[m][1] += amk * b1;
    }
  }
  for (int m = 0; m < kRows; ++m) {
    Store(c + m * cols, acc[m][0]);
    Store(c + m * cols + kLanes<T>, acc[m][1]);
  }
}

// Row blocks outer, column tiles inner: each block of the product is
// written as one contiguous stretch (the outer-product case writes a large
// product, which is slow to write a column strip at a time).
template <typename T, int kRows>
TENSORBOW_INLINE void ProductRowBlock(Left<T> a, const T* b, T* c,
                                      int64_t depth, int64_t cols,
                                      int64_t m) {
  const Left<T> rows{a.data + m * a.row_stride, a.row_stride, a.col_stride};
  for (int64_t j = 0; j < cols; j += kTile<T>) {
    Tile<T, kRows, false>(rows, b + j, c + m * cols + j, depth, cols,
                          std::min(kTile<T>, cols - j));
  }
}

template <typename T>
TENSORBOW_INLINE void ProductImpl(Left<T> a, const T* b, T* c, int64_t depth,
                                  int64_t cols, int64_t row_begin,
                                  int64_t row_end) {
  int64_t m = row_begin;
  for (; m + 4 <= row_end; m += 4) {
    ProductRowBlock<T, 4>(a, b, c, depth, cols, m);
  }
  switch (row_end - m) {
    case 3:
      ProductRowBlock<T, 3>(a, b, c, depth, cols, m);
      break;
    case 2:
      ProductRowBlock<T, 2>(a, b, c, depth, cols, m);
      break;
    case 1:
      ProductRowBlock<T, 1>(a, b, c, depth, cols, m);
      break;
    default:
      break;
  }
}

// Rows of b taken together by AccumulateImpl: a few whole rows are read
// side by side, in order, which the prefetchers follow (a tile's column
// strip down every row of b, 64 bytes a row, they do not).
constexpr int64_t kDepthBlock = 8;

template <typename T, int kRows>
TENSORBOW_INLINE void AccumulateRowBlock(Left<T> a, const T* b, T* c,
                                         int64_t cols, int64_t m, int64_t k,
                                         int64_t depth) {
  const Left<T> at{a.data + m * a.row_stride + k * a.col_stride, a.row_stride,
                   a.col_stride};
  for (int64_t j = 0; j < cols; j += kTile<T>) {
    Tile<T, kRows, true>(at, b + k * cols + j, c + m * cols + j, depth,
                          cols, std::min(kTile<T>, cols - j));
  }
}

template <typename T>
TENSORBOW_INLINE void AccumulateImpl(Left<T> a, const T* b, T* c,
                                     int64_t rows, int64_t cols,
                                     int64_t k_begin, int64_t k_end) {
  for (int64_t k = k_begin; k < k_end; k += kDepthBlock) {
    const int64_t depth = std::min(kDepthBlock, k_end - k);
    int64_t m = 0;
    for (; m + 4 <= rows; m += 4) {
      AccumulateRowBlock<T, 4>(a, b, c, cols, m, k, depth);
    }
    switch (rows - m) {
      case 3:
        AccumulateRowBlock<T, 3>(a, b, c, cols, m, k, depth);
        break;
      case 2:
        AccumulateRowBlock<T, 2>(a, b, c, cols, m, k, depth);
        break;
      case 1:
        AccumulateRowBlock<T, 1>(a, b, c, cols, m, k, depth);
        break;
      default:
        break;
    }
  }
}

// c[m, 0] = dot(a[m, :], b) for m < kRows, c's rows `cols` apart.
template <typename T, int kRows>
TENSORBOW_INLINE void DotTile(const T* a, const T* b, T* c, int64_t depth,
                              int64_t cols) {
  Vec<T> acc[kRows][2] = {};
  int64_t k = 0;
  for (; k + kTile<T> <= depth; k += kTile<T>) {
    const Vec<T> b0 = Load(b + k);
    const Vec<T> b1 = Load(b + k + kLanes<T>);
    for (int m = 0; m < kRows; ++m) {
      acc[m][0] += Load(a + m * depth + k) * b0;
      acc[m][1] += Load(a + m * depth + k + kLanes<T>) * b1;
    }
  }
  for (int m = 0; m < kRows; ++m) {
    const Vec<T> v = acc[m][0] + acc[m][1];
    T sum = T(0);
    for (int64_t l = 0; l < kLanes<T>; ++l) sum += v[l];
    for (int64_t r = k; r < depth; ++r) sum += a[m * depth + r] * b[r];
    c[m * cols] = sum;
  }
}

template <typename T>
TENSORBOW_INLINE void TransposedProductImpl(const T* a, const T* b, T* c,
                                            int64_t rows, int64_t depth,
                                            int64_t cols, int64_t n_begin,
                                            int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const T* bn = b + n * depth;
    int64_t m = 0;
    for (; m + 4 <= rows; m += 4) {
      DotTile<T, 4>(a + m * depth, bn, c + m * cols + n, depth, cols);
    }
    const T* a_rest = a + m * depth;
    T* c_rest = c + m * cols + n;
    switch (rows - m) {
      case 3:
        DotTile<T, 3>(a_rest, bn, c_rest, depth, cols);
        break;
      case 2:
        DotTile<T, 2>(a_rest, bn, c_rest, depth, cols);
        break;
      case 1:
        DotTile<T, 1>(a_rest, bn, c_rest, depth, cols);
        break;
      default:
        break;
    }
  }
}

// The update of kind kKind (sma_step.h's step::Apply) of one vector of var
// (and accum) by gradient g.
using step::Update;

template <typename T, Update kKind>
TENSORBOW_INLINE void UpdateVec(T* var, T* accum, const Vec<T>& g, T lr,
                                T momentum) {
  Vec<T> acc = {};
  if constexpr (kKind != Update::kGradientDescent) acc = Load(accum);
  Store(var, step::Apply<kKind>(Load(var), &acc, g, lr, momentum));
  if constexpr (kKind != Update::kGradientDescent) Store(accum, acc);
}

template <typename T, Update kKind>
TENSORBOW_INLINE void UpdateScalar(T* var, T* accum, T g, T lr, T momentum) {
  T acc = T(0);
  if constexpr (kKind != Update::kGradientDescent) acc = *accum;
  *var = step::Apply<kKind>(*var, &acc, g, lr, momentum);
  if constexpr (kKind != Update::kGradientDescent) *accum = acc;
}

// Row m of g = aᵀ·b, a tile of columns at a time in registers, applied to
// var's (and accum's) row m as it is made.
template <typename T, Update kKind>
TENSORBOW_INLINE void ApplyOuterImpl(const T* a, const T* b, T* var,
                                     T* accum, int64_t depth, int64_t rows,
                                     int64_t cols, T lr, T momentum,
                                     int64_t row_begin, int64_t row_end) {
  for (int64_t m = row_begin; m < row_end; ++m) {
    T* v = var + m * cols;
    T* acc = accum == nullptr ? nullptr : accum + m * cols;
    int64_t j = 0;
    for (; j + kTile<T> <= cols; j += kTile<T>) {
      Vec<T> g0 = {}, g1 = {};
      for (int64_t k = 0; k < depth; ++k) {
        const T akm = a[k * rows + m];
        g0 += akm * Load(b + k * cols + j);
        g1 += akm * Load(b + k * cols + j + kLanes<T>);
      }
      UpdateVec<T, kKind>(v + j, acc == nullptr ? nullptr : acc + j, g0, lr,
                          momentum);
      UpdateVec<T, kKind>(v + j + kLanes<T>,
                          acc == nullptr ? nullptr : acc + j + kLanes<T>, g1,
                          lr, momentum);
    }
    for (; j < cols; ++j) {
      T g = T(0);
      for (int64_t k = 0; k < depth; ++k) g += a[k * rows + m] * b[k * cols + j];
      UpdateScalar<T, kKind>(v + j, acc == nullptr ? nullptr : acc + j, g, lr,
                             momentum);
    }
  }
}

template <typename T>
TENSORBOW_INLINE void ApplyOuterKind(const T* a, const T* b, T* var,
                                     T* accum, int64_t depth, int64_t rows,
                                     int64_t cols, T lr, T momentum,
                                     bool nesterov, int64_t row_begin,
                                     int64_t row_end) {
  if (accum == nullptr) {
    ApplyOuterImpl<T, Update::kGradientDescent>(
        a, b, var, accum, depth, rows, cols, lr, momentum, row_begin,
        row_end);
  } else if (nesterov) {
    ApplyOuterImpl<T, Update::kNesterov>(a, b, var, accum, depth, rows, cols,
                                         lr, momentum, row_begin, row_end);
  } else {
    ApplyOuterImpl<T, Update::kMomentum>(a, b, var, accum, depth, rows, cols,
                                         lr, momentum, row_begin, row_end);
  }
}

}  // namespace

TENSORBOW_CLONES void Product(Left<float> a, const float* b, float* c,
                              int64_t depth, int64_t cols, int64_t row_begin,
                              int64_t row_end) {
  ProductImpl(a, b, c, depth, cols, row_begin, row_end);
}

TENSORBOW_CLONES void Product(Left<double> a, const double* b, double* c,
                              int64_t depth, int64_t cols, int64_t row_begin,
                              int64_t row_end) {
  ProductImpl(a, b, c, depth, cols, row_begin, row_end);
}

TENSORBOW_CLONES void AccumulateProduct(Left<float> a, const float* b,
                                        float* c, int64_t rows, int64_t cols,
                                        int64_t k_begin, int64_t k_end) {
  AccumulateImpl(a, b, c, rows, cols, k_begin, k_end);
}

TENSORBOW_CLONES void AccumulateProduct(Left<double> a, const double* b,
                                        double* c, int64_t rows, int64_t cols,
                                        int64_t k_begin, int64_t k_end) {
  AccumulateImpl(a, b, c, rows, cols, k_begin, k_end);
}

TENSORBOW_CLONES void TransposedProduct(const float* a, const float* b,
                                        float* c, int64_t rows, int64_t depth,
                                        int64_t cols, int64_t n_begin,
                                        int64_t n_end) {
  TransposedProductImpl(a, b, c, rows, depth, cols, n_begin, n_end);
}

TENSORBOW_CLONES void TransposedProduct(const double* a, const double* b,
                                        double* c, int64_t rows,
                                        int64_t depth, int64_t cols,
                                        int64_t n_begin, int64_t n_end) {
  TransposedProductImpl(a, b, c, rows, depth, cols, n_begin, n_end);
}

TENSORBOW_CLONES void ApplyOuter(const float* a, const float* b, float* var,
                                 float* accum, int64_t depth, int64_t rows,
                                 int64_t cols, float lr, float momentum,
                                 bool nesterov, int64_t row_begin,
                                 int64_t row_end) {
  ApplyOuterKind(a, b, var, accum, depth, rows, cols, lr, momentum, nesterov,
                 row_begin, row_end);
}

TENSORBOW_CLONES void ApplyOuter(const double* a, const double* b,
                                 double* var, double* accum, int64_t depth,
                                 int64_t rows, int64_t cols, double lr,
                                 double momentum, bool nesterov,
                                 int64_t row_begin, int64_t row_end) {
  ApplyOuterKind(a, b, var, accum, depth, rows, cols, lr, momentum, nesterov,
                 row_begin, row_end);
}

}  // namespace small_matmul
}  // namespace tensorbow
