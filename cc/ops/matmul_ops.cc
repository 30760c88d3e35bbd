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
    .SetShapeFn(tensorflow::shape_inference::MatMulShape)
    .Doc(R"doc(
product = op(a) · op(b), op(x) = x or its transpose, as MatMul computes it.

For a product with few rows (a small batch times a weight, or a gradient
times a weight's transpose) or a small inner dimension (a weight's gradient
over a small batch), the kernel reads the large operand once and writes the
product once; other shapes take TensorFlow's Eigen contraction.
)doc");

}  // namespace tensorbow
