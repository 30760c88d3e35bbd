// Op registrations for synchronous model averaging (SMA).
//
// Every op but the *WithCentral ones comes as a pair, like TensorFlow's own
// training ops: the `TensorBowApply...` form takes reference variables
// (`Ref(T)`), the `TensorBowResourceApply...` form takes resource handles.
// Both forms are registered from one definition (RegisterPair). Correction
// buffers and the central model's previous value (`central_prev`) are
// always resource variables owned by TensorBow. The maths is in
// cc/kernels/sma_ops.h and cc/kernels/sma_step.h.
#include <string>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "cc/ops/op_forms.h"

namespace tensorbow {

using tensorflow::Status;  // absl::Status
using tensorflow::register_op::OpDefBuilderWrapper;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

// The shape of variable input `index`: a ref input's own shape, or the shape
// recorded on a resource handle (unknown if the handle carries none).
ShapeHandle VariableShape(InferenceContext* c, int index, bool resource) {
  if (!resource) return c->input(index);
  const auto* handle = c->input_handle_shapes_and_types(index);
  if (handle != nullptr && !handle->empty()) return (*handle)[0].shape;
  return c->UnknownShape();
}

// Merges the shapes of the variable inputs `ref_inputs` and
// `resource_inputs` and the dense inputs `dense_inputs` (all of them the
// variable's shape), checks `scalar_inputs` are scalars, and sets the ref
// output of the reference-variable forms to the variable's shape.
// With `outer` >= 0, inputs `outer` and `outer` + 1 are the factors a and b
// of a gradient aᵀ·b in place of a dense input: matrices with as many rows.
Status SmaShape(InferenceContext* c, std::vector<int> ref_inputs,
                std::vector<int> resource_inputs, std::vector<int> dense_inputs,
                std::vector<int> scalar_inputs, int outer = -1) {
  ShapeHandle s = c->UnknownShape();
  if (outer >= 0) {
    ShapeHandle a, b;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(outer), 2, &a));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(outer + 1), 2, &b));
    tensorflow::shape_inference::DimensionHandle unused;
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(a, 0), c->Dim(b, 0), &unused));
    s = c->Matrix(c->Dim(a, 1), c->Dim(b, 1));
  }
  for (int i : ref_inputs) {
    TF_RETURN_IF_ERROR(c->Merge(s, VariableShape(c, i, false), &s));
  }
  for (int i : resource_inputs) {
    TF_RETURN_IF_ERROR(c->Merge(s, VariableShape(c, i, true), &s));
  }
  for (int i : dense_inputs) {
    TF_RETURN_IF_ERROR(c->Merge(s, c->input(i), &s));
  }
  ShapeHandle unused;
  for (int i : scalar_inputs) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
  }
  if (!ref_inputs.empty() && c->num_outputs() > 0) c->set_output(0, s);
  return absl::OkStatus();
}

// SmaShape for `form` with the model-variable inputs `variables`: reference
// inputs in the reference form, else resource inputs before `resources`.
Status FormShape(const Form& form, InferenceContext* c,
                 const std::vector<int>& variables, std::vector<int> resources,
                 std::vector<int> dense, std::vector<int> scalars,
                 int outer = -1) {
  if (form.ref()) {
    return SmaShape(c, variables, resources, dense, scalars, outer);
  }
  std::vector<int> handles = variables;
  handles.insert(handles.end(), resources.begin(), resources.end());
  return SmaShape(c, {}, handles, dense, scalars, outer);
}

// ---- SMA fused with plain SGD -----------------------------------------------

const bool kApplySmaGradientDescent = RegisterPair(
    "TensorBowApplySmaGradientDescent",
    "TensorBowResourceApplySmaGradientDescent",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input("correction: resource")
          .Input("central: T")
          .Input("alpha: T")
          .Input("lr: T")
          .Input("delta: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {2, 5}, {3, 4});
          })
          .Doc(R"doc(
One replica's SGD step with its SMA correction, in one pass:
c = alpha * (var - central); correction = c; var = var - lr * delta - c.
)doc");
    });

// ---- SMA fused with momentum SGD --------------------------------------------

const bool kApplySmaMomentum = RegisterPair(
    "TensorBowApplySmaMomentum", "TensorBowResourceApplySmaMomentum",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input(form.Variable("accum"))
          .Input("correction: resource")
          .Input("central: T")
          .Input("alpha: T")
          .Input("lr: T")
          .Input("grad: T")
          .Input("momentum: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .Attr("use_nesterov: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0, 1}, {2}, {3, 6}, {4, 5, 7});
          })
          .Doc(R"doc(
One replica's momentum step with its SMA correction, in one pass:
c = alpha * (var - central); correction = c;
accum = momentum * accum + grad;
var = var - lr * accum - c                              (use_nesterov false)
var = var - lr * grad - lr * momentum * accum - c       (use_nesterov true)
)doc");
    });

// ---- The same, with the gradient given as its factors ------------------------

const bool kApplySmaGradientDescentOuter = RegisterPair(
    "TensorBowApplySmaGradientDescentOuter",
    "TensorBowResourceApplySmaGradientDescentOuter",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input("correction: resource")
          .Input("central: T")
          .Input("alpha: T")
          .Input("lr: T")
          .Input("a: T")
          .Input("b: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {2}, {3, 4}, 5);
          })
          .Doc(R"doc(
TensorBowApplySmaGradientDescent with delta = aᵀ·b, never materialised: for
a dense layer y = x·W, a = x and b = dy.
)doc");
    });

const bool kApplySmaMomentumOuter = RegisterPair(
    "TensorBowApplySmaMomentumOuter",
    "TensorBowResourceApplySmaMomentumOuter",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input(form.Variable("accum"))
          .Input("correction: resource")
          .Input("central: T")
          .Input("alpha: T")
          .Input("lr: T")
          .Input("a: T")
          .Input("b: T")
          .Input("momentum: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .Attr("use_nesterov: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0, 1}, {2}, {3}, {4, 5, 8}, 6);
          })
          .Doc(R"doc(
TensorBowApplySmaMomentum with grad = aᵀ·b, never materialised.
)doc");
    });

// ---- Generic correction around any optimizer's apply op ---------------------

const bool kSmaCorrection = RegisterPair(
    "TensorBowSmaCorrection", "TensorBowResourceSmaCorrection",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"))
          .Input("correction: resource")
          .Input("central: T")
          .Input("alpha: T")
          .Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {2}, {3});
          })
          .Doc(R"doc(
correction = alpha * (var - central); run before the optimizer's apply op.
)doc");
    });

const bool kApplySmaCorrection = RegisterPair(
    "TensorBowApplySmaCorrection", "TensorBowResourceApplySmaCorrection",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var")).Input("correction: resource");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {}, {});
          })
          .Doc(R"doc(
var = var - correction; run after the optimizer's apply op.
)doc");
    });

// ---- Central-model update ---------------------------------------------------

const bool kApplySmaCentral = RegisterPair(
    "TensorBowApplySmaCentral", "TensorBowResourceApplySmaCentral",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("central"))
          .Input("central_prev: resource")
          .Input("corrections: N * T")
          .Input("momentum: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("N: int >= 1")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            int n;
            TF_RETURN_IF_ERROR(c->GetAttr("N", &n));
            std::vector<int> dense;
            for (int i = 0; i < n; ++i) dense.push_back(2 + i);
            return FormShape(form, c, {0}, {1}, dense, {2 + n});
          })
          .Doc(R"doc(
The synchronisation step of SMA for one variable:
central_new = central + sum(corrections) + momentum * (central - central_prev);
central_prev = central; central = central_new.
)doc");
    });

// ---- Central-model update by the last replica (the leader) -------------------

const bool kApplySmaCentralLeader = RegisterPair(
    "TensorBowApplySmaCentralLeader",
    "TensorBowResourceApplySmaCentralLeader",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("central"))
          .Input("central_prev: resource")
          .Input("corrections: N * resource")
          .Input("momentum: T")
          .Attr("T: {half, bfloat16, float, double}")
          .Attr("N: int >= 1")
          .Attr("barrier: string")
          .Attr("use_locking: bool = false")
          .SetIsStateful()
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {}, {c->num_inputs() - 1});
          })
          .Doc(R"doc(
Counts one replica's arrival at this variable in the current wave; the N-th
arrival (the leader) applies TensorBowApplySmaCentral with the N replicas'
correction buffers and starts the count again. `barrier` names the count.
)doc");
    });

// ---- The sum across devices' copies of the central model -------------------

const bool kSumDeviceCopies = RegisterPair(
    "TensorBowSumDeviceCopies", "TensorBowResourceSumDeviceCopies",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("central"))
          .Input("central_prev: resource")
          .Input("copies: N * resource")
          .Input("momentum: T");
      form.RefOutput(op);
      op.Attr("T: {half, bfloat16, float, double}")
          .Attr("N: int >= 1")
          .Attr("use_locking: bool = false")
          .SetShapeFn([form](InferenceContext* c) {
            return FormShape(form, c, {0}, {1}, {}, {c->num_inputs() - 1});
          })
          .Doc(R"doc(
After a wave on N devices, each of which moved its copy of the central model
from base = central + momentum * (central - central_prev):
central_new = base + sum over the copies of (copy - base);
central_prev = central; central = central_new; every copy = central_new.
)doc");
    });


// ---- SMA fused with the step and the central update ------------------------
// The replica's variables and the central model come as references or
// handles; the central model's other two buffers are always resource
// variables, and the three are rotated by swapping.

// The central model's buffers, after the replica's variables.
void CentralInputs(OpDefBuilderWrapper& op, const Form& form) {
  op.Input(form.Variable("central"))
      .Input("central_prev: resource")
      .Input("next: resource");
}

// What every *WithCentral op has after its inputs, the last of which is
// the replica's index.
void WithCentralAttrs(OpDefBuilderWrapper& op, const Form& form,
                      bool momentum) {
  op.Input("replica_index: int32");
  form.RefOutput(op);
  op.Attr("T: {float, double}").Attr("use_locking: bool = false");
  if (momentum) op.Attr("use_nesterov: bool = false");
  op.Attr("replica: int >= 0")
      .Attr("num_replicas: int >= 1")
      .Attr("first_replica: int >= 0 = 0")
      .Attr("stagger: int >= 0 = 0")
      .Attr("barrier: string")
      .SetIsStateful();
}

const bool kApplySmaGradientDescentWithCentral = RegisterPair(
    "TensorBowApplySmaGradientDescentWithCentral",
    "TensorBowResourceApplySmaGradientDescentWithCentral",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"));
      CentralInputs(op, form);
      op.Input("alpha: T")
          .Input("lr: T")
          .Input("delta: T")
          .Input("central_momentum: T");
      WithCentralAttrs(op, form, /*momentum=*/false);
      op.SetShapeFn([form](InferenceContext* c) {
          return FormShape(form, c, {0, 1}, {2, 3}, {6}, {4, 5, 7, 8});
        }).Doc(R"doc(
Replica `replica_index`'s SGD step with its SMA correction and its share of
the central update, in one pass over memory:
c = alpha * (var - central); var = var - lr * delta - c;
next = central + central_momentum * (central - central_prev) + the
corrections of the wave's num_replicas replicas (replica_index in
[first_replica, first_replica + num_replicas)), added in replica order
whatever order the replicas run in: a replica ahead of its turn keeps its
correction until then. The last replica to finish sets central_prev =
central and central = next (by swapping buffers). When alpha and
central_momentum are both 0 the wave is the step alone: the central model's
buffers are neither read nor written. `barrier` names the per-variable
count, reset by TensorBowResetSmaBarriers. The pass starts at the `replica`-th of
`stagger` (0: num_replicas) evenly spaced positions, so that ops run at
once by different stream groups start apart.
)doc");
    });

const bool kApplySmaMomentumWithCentral = RegisterPair(
    "TensorBowApplySmaMomentumWithCentral",
    "TensorBowResourceApplySmaMomentumWithCentral",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var")).Input(form.Variable("accum"));
      CentralInputs(op, form);
      op.Input("alpha: T")
          .Input("lr: T")
          .Input("grad: T")
          .Input("momentum: T")
          .Input("central_momentum: T");
      WithCentralAttrs(op, form, /*momentum=*/true);
      op.SetShapeFn([form](InferenceContext* c) {
          return FormShape(form, c, {0, 1, 2}, {3, 4}, {7},
                           {5, 6, 8, 9, 10});
        }).Doc(R"doc(
As TensorBow{,Resource}ApplySmaGradientDescentWithCentral with the momentum
step of TensorBow{,Resource}ApplySmaMomentum:
accum = momentum * accum + grad; var = var - lr * accum - c (or Nesterov's).
)doc");
    });

const bool kApplySmaGradientDescentOuterWithCentral = RegisterPair(
    "TensorBowApplySmaGradientDescentOuterWithCentral",
    "TensorBowResourceApplySmaGradientDescentOuterWithCentral",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var"));
      CentralInputs(op, form);
      op.Input("alpha: T")
          .Input("lr: T")
          .Input("a: T")
          .Input("b: T")
          .Input("central_momentum: T");
      WithCentralAttrs(op, form, /*momentum=*/false);
      op.SetShapeFn([form](InferenceContext* c) {
          return FormShape(form, c, {0, 1}, {2, 3}, {}, {4, 5, 8, 9}, 6);
        }).Doc(R"doc(
TensorBow{,Resource}ApplySmaGradientDescentWithCentral with delta = aᵀ·b,
never materialised: for a dense layer y = x·W, a = x and b = dy.
)doc");
    });

const bool kApplySmaMomentumOuterWithCentral = RegisterPair(
    "TensorBowApplySmaMomentumOuterWithCentral",
    "TensorBowResourceApplySmaMomentumOuterWithCentral",
    [](OpDefBuilderWrapper& op, const Form& form) {
      op.Input(form.Variable("var")).Input(form.Variable("accum"));
      CentralInputs(op, form);
      op.Input("alpha: T")
          .Input("lr: T")
          .Input("a: T")
          .Input("b: T")
          .Input("momentum: T")
          .Input("central_momentum: T");
      WithCentralAttrs(op, form, /*momentum=*/true);
      op.SetShapeFn([form](InferenceContext* c) {
          return FormShape(form, c, {0, 1, 2}, {3, 4}, {},
                           {5, 6, 9, 10, 11}, 7);
        }).Doc(R"doc(
TensorBow{,Resource}ApplySmaMomentumWithCentral with grad = aᵀ·b, never
materialised.
)doc");
    });

}  // namespace

REGISTER_OP("TensorBowResetSmaBarriers")
    .Attr("barriers: list(string)")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Starts the counts of the named leader barriers again (after a failed wave).
)doc");

REGISTER_OP("TensorBowSetSmaParticipants")
    .Input("count: int32")
    .Attr("barriers: list(string)")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Makes the named barriers wait for `count` replicas in the coming wave only,
instead of all of them (replicas left out of a wave's update).
)doc");

}  // namespace tensorbow
