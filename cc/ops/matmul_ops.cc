// Op registrations of TensorBowMatMul, a MatMul for a small batch, and of
// the apply ops that take a dense layer's weight gradient as its two
// factors, both variable forms from one definition (op_forms.h). The
// kernels are in cc/kernels/matmul_ops.cc.
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "cc/ops/op_forms.h"

namespace tensorbow {

using tensorflow::register_op::OpDefBuilderWrapper;
using tensorflow::shape_inference::InferenceContext;

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
  at least this many elements; below it TensorFlow's kernel is faster
  (a small weight's cost is mostly that of splitting the work between
  threads).
)doc");

// ---- A dense layer's weight update from its gradient's factors --------------

namespace {

// var (input 0) and the variables after it have shape [k, n] for a: [b, k]
// and b: [b, n], inputs `a` and `a` + 1; `scalars` are scalars. The ref
// ops' output has var's shape.
tensorflow::Status OuterApplyShape(
    tensorflow::shape_inference::InferenceContext* c, int num_vars, int a,
    std::vector<int> scalars, bool ref) {
  using tensorflow::shape_inference::DimensionHandle;
  using tensorflow::shape_inference::ShapeHandle;
  ShapeHandle left, right, unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(a), 2, &left));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(a + 1), 2, &right));
  DimensionHandle rows;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(left, 0), c->Dim(right, 0), &rows));
  ShapeHandle grad = c->Matrix(c->Dim(left, 1), c->Dim(right, 1));
  for (int i : scalars) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
  }
  if (ref) {
    for (int i = 0; i < num_vars; ++i) {
      TF_RETURN_IF_ERROR(c->Merge(grad, c->input(i), &grad));
    }
    c->set_output(0, grad);
  }
  return absl::OkStatus();
}

}  // namespace

const bool kApplyMomentumOuter = RegisterPair(
    "TensorBowApplyMomentumOuter", "TensorBowResourceApplyMomentumOuter",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input(form.Variable("accum"))
          .Input("lr: T")
          .Input("a: T")
          .Input("b: T")
          .Input("momentum: T");
      form.RefOutput(op);
      op.Attr("T: {float, double}")
          .Attr("use_locking: bool = false")
          .Attr("use_nesterov: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return OuterApplyShape(c, 2, 3, {2, 5}, form.ref());
          })
          .Doc(R"doc(
ApplyMomentum with the gradient aᵀ·b, without materialising it: for a
dense layer y = x·W, a = x and b = dy. With grad = aᵀ·b,
accum = momentum * accum + grad;
var = var - lr * accum                              (use_nesterov false)
var = var - lr * grad - lr * momentum * accum       (use_nesterov true)
)doc");
    });

const bool kApplyGradientDescentOuter = RegisterPair(
    "TensorBowApplyGradientDescentOuter",
    "TensorBowResourceApplyGradientDescentOuter",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input("alpha: T")
          .Input("a: T")
          .Input("b: T");
      form.RefOutput(op);
      op.Attr("T: {float, double}")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return OuterApplyShape(c, 1, 2, {1}, form.ref());
          })
          .Doc(R"doc(
ApplyGradientDescent with the gradient aᵀ·b: var = var - alpha * aᵀ·b.
)doc");
    });

}  // namespace tensorbow
