// Op registration of TensorBowMatMul, a MatMul for a small batch. The
// kernel is in cc/kernels/matmul_ops.cc.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace tensorbow {

REGISTER_OP("TensorBowMatMul")
    .Input("a: T")
    .Input("b: T")
    .Output("product: T")
    .Attr("transpose_a: bool = false")
    .Attr("transpose_b: bool = false")
    .Attr("T: {float, double}")
    .Attr("min_elements: int = 65536")
    .SetShapeFn(tensorflow::shape_inference::MatMulShape)
    .Doc(R"doc(
product = op(a) · op(b), op(x) = x or its transpose, as MatMul computes it.

For a product with few rows (a small batch times a weight, or a gradient
times a weight's transpose) or a small inner dimension (a weight's gradient
over a small batch), the kernel reads the large operand once and writes the
product once; other shapes run TensorFlow's own MatMul kernel.

min_elements: the small-batch loops run only when op(b) or the product has
  at least this many elements; below it TensorFlow's kernel is faster (a
  784 x 10 weight: 0.2 ms against 0.3-0.6 ms, mostly the cost of splitting
  the work between threads).
)doc");

}  // namespace tensorbow
