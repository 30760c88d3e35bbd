// Op registrations for replica-suffixed variables.
//
// A replicated variable `var_name` has one copy per replica, held in the
// device's resource manager as a resource variable named
// `<var_name>/replica_<r>`. The learning part of the execution graph is
// copied once per stream group, not once per replica: its variable ops
// resolve to replica r's copy at run time from the `replica` input, which
// the runtime feeds per learning task. The other ops reach every replica's
// copy at once, so no op is made per replica. Kernels in
// cc/kernels/replica_ops.cc.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorbow {

using tensorflow::Status;  // absl::Status
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {

Status VariableShape(InferenceContext* c, ShapeHandle* out) {
  tensorflow::PartialTensorShape shape;
  TF_RETURN_IF_ERROR(c->GetAttr("shape", &shape));
  return c->MakeShapeFromPartialTensorShape(shape, out);
}

// Every output a scalar handle to a variable of attrs dtype and shape.
Status HandlesShape(InferenceContext* c) {
  tensorflow::DataType dtype;
  TF_RETURN_IF_ERROR(c->GetAttr("dtype", &dtype));
  ShapeHandle shape;
  TF_RETURN_IF_ERROR(VariableShape(c, &shape));
  for (int i = 0; i < c->num_outputs(); ++i) {
    c->set_output(i, c->Scalar());
    c->set_output_handle_shapes_and_types(
        i, std::vector<tensorflow::shape_inference::ShapeAndType>{
               {shape, dtype}});
  }
  return absl::OkStatus();
}

// As HandlesShape, for an op taking the replica index.
Status HandleShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
  return HandlesShape(c);
}

}  // namespace

REGISTER_OP("TensorBowReplicaVarHandle")
    .Input("replica: int32")
    .Output("resource: resource")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .Attr("num_replicas: int >= 1")
    .SetIsStateful()
    .SetShapeFn(HandleShape)
    .Doc(R"doc(
The handle of replica `replica`'s copy of variable `var_name`, made (not
initialised) on first use. `replica` must be in [0, num_replicas).
)doc");

REGISTER_OP("TensorBowReplicaVariable")
    .Input("replica: int32")
    .Output("ref: Ref(dtype)")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .Attr("num_replicas: int >= 1")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(VariableShape(c, &shape));
      c->set_output(0, shape);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Replica `replica`'s copy of variable `var_name` as a reference, for the
reference-variable ops of the TF1 optimizers: the same storage as
TensorBowReplicaVarHandle's.
)doc");

REGISTER_OP("TensorBowReplicaHandles")
    .Output("handles: num_replicas * resource")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .Attr("num_replicas: int >= 1")
    .SetIsStateful()
    .SetShapeFn(HandlesShape)
    .Doc(R"doc(
The handles of every replica's copy of `var_name`, in replica order.
)doc");

REGISTER_OP("TensorBowSetReplicas")
    .Input("value: dtype")
    .Input("replicas: int32")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("num_replicas: int >= 1")
    .Attr("stacked: bool = false")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Sets the copies of `var_name` of the replicas listed in `replicas` (a
vector), making them if needed: each to a copy of `value`, or with
`stacked` replicas[i] to value[i].
)doc");

REGISTER_OP("TensorBowReplicaMean")
    .Input("source: int32")
    .Output("value: dtype")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .Attr("num_replicas: int >= 1")
    .Attr("mean: bool = true")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(VariableShape(c, &shape));
      c->set_output(0, shape);
      return absl::OkStatus();
    })
    .Doc(R"doc(
With `mean`, the mean of every replica's copy of `var_name` (sum in replica
order, then divided by num_replicas); without it, or for a dtype that is
not floating point, replica `source`'s copy.
)doc");

REGISTER_OP("TensorBowDeviceVarHandle")
    .Output("resource: resource")
    .Attr("container: string = ''")
    .Attr("shared_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .SetIsStateful()
    .SetShapeFn(HandlesShape)
    .Doc(R"doc(
The resource variable `shared_name` of the first CPU device, as a handle of
the device this op runs on: for a stream group pinned to a device of its
own. The variable must exist.
)doc");

REGISTER_OP("TensorBowLocalSgdExchange")
    .Input("central: dtype")
    .Input("velocity: resource")
    .Input("rate: dtype")
    .Input("momentum: dtype")
    .Input("keep: dtype")
    .Output("new_central: dtype")
    .Attr("var_name: string")
    .Attr("dtype: {float, double}")
    .Attr("num_replicas: int >= 1")
    .Attr("nesterov: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Local SGD's exchange for variable `var_name`: with z the central model's
value and v the outer velocity, delta = z - the mean of the replicas'
copies; v' = momentum * v + delta; new_central = z - rate * (delta +
momentum * v' if nesterov else v'); then v = keep * v' and every replica's
copy is set to new_central, in one pass over the elements.
)doc");

REGISTER_OP("TensorBowStackReplicas")
    .Output("value: dtype")
    .Attr("var_name: string")
    .Attr("dtype: type")
    .Attr("shape: shape")
    .Attr("num_replicas: int >= 1")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      int64_t n;
      TF_RETURN_IF_ERROR(c->GetAttr("num_replicas", &n));
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(VariableShape(c, &shape));
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(n), shape, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Every replica's copy of `var_name`, stacked: value[r] is replica r's.
)doc");

}  // namespace tensorbow
