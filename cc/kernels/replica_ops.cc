// Kernels of the replica-suffixed variable ops (cc/ops/replica_ops.cc).
//
// Every replica's copy of a variable is a tensorflow::Var in the device's
// resource manager, whatever the kind of the user's variable: a reference
// variable's replicas are handed out as references to the Var's tensor,
// under the Var's mutex, which is what TensorFlow's reference-variable ops
// lock. A copy exists once some op has asked for it; it holds its tensor
// and nothing else.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/kernels/home_device.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tensorbow {
namespace {

using Eigen::Index;
using tensorflow::DataType;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::PartialTensorShape;
using tensorflow::ResourceMgr;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::Var;
namespace errors = tensorflow::errors;

std::string ReplicaName(const std::string& var_name, int64_t replica) {
  return absl::StrCat(var_name, "/replica_", replica);
}

// Sets output `index` to a handle of this device to Var `name`.
tensorflow::Status OutputHandle(OpKernelContext* ctx, int index,
                                const std::string& container,
                                const std::string& name, DataType dtype,
                                const PartialTensorShape& shape) {
  tensorflow::AllocatorAttributes attr;
  attr.set_on_host(true);
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(
      ctx->allocate_output(index, TensorShape({}), &out, attr));
  out->scalar<tensorflow::ResourceHandle>()() =
      tensorflow::MakeResourceHandle<Var>(
          ctx, container, name,
          {tensorflow::DtypeAndPartialTensorShape{dtype, shape}});
  return absl::OkStatus();
}

// What every replica op knows: the variable, its dtype and the number of
// replicas.
class ReplicaOpBase : public OpKernel {
 public:
  explicit ReplicaOpBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("var_name", &var_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_replicas", &num_replicas_));
    if (HasAttr(ctx, "shape")) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape_));
    }
  }

 protected:
  static bool HasAttr(OpKernelConstruction* ctx, const char* name) {
    return ctx->def().attr().count(name) > 0;
  }

  tensorflow::Status CheckReplica(int64_t replica) const {
    if (replica < 0 || replica >= num_replicas_) {
      return errors::InvalidArgument(name(), ": replica ", replica,
                                     " is not in [0, ", num_replicas_, ")");
    }
    return absl::OkStatus();
  }

  // The scalar replica index of input `index`, checked.
  tensorflow::Status ReplicaInput(OpKernelContext* ctx, int index,
                                  int64_t* replica) const {
    const Tensor& t = ctx->input(index);
    if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
      return errors::InvalidArgument(name(), ": replica must be a scalar, "
                                     "got shape ", t.shape().DebugString());
    }
    *replica = t.scalar<int32_t>()();
    return CheckReplica(*replica);
  }

  // Replica `replica`'s copy, made on first use (at home, and visible
  // from this device: home_device.h); the caller unrefs it.
  tensorflow::Status Replica(OpKernelContext* ctx, int64_t replica,
                             Var** var) const {
    const DataType dtype = dtype_;
    TF_RETURN_IF_ERROR(LookupOrCreateAtHome<Var>(
        ctx, ReplicaName(var_name_, replica), var, [dtype](Var** v) {
          *v = new Var(dtype);
          return absl::OkStatus();
        }));
    if ((*var)->tensor()->dtype() != dtype_) {
      (*var)->Unref();
      return errors::InvalidArgument(
          name(), ": replica ", replica, " of '", var_name_, "' has dtype ",
          tensorflow::DataTypeString((*var)->tensor()->dtype()), ", not ",
          tensorflow::DataTypeString(dtype_));
    }
    return absl::OkStatus();
  }

  // Replica `replica`'s value (shares its buffer), checked to be set.
  // Requires the Var's lock. Only TensorBowSetReplicas sets a copy first.
  tensorflow::Status Value(Var* var, int64_t replica, Tensor* out) const {
    if (!var->is_initialized) {
      return errors::FailedPrecondition(
          name(), ": replica ", replica, " of '", var_name_,
          "' was never set (TensorBow seeds replicas before they train)");
    }
    *out = *var->tensor();
    return absl::OkStatus();
  }

  std::string var_name_;
  DataType dtype_;
  int64_t num_replicas_ = 1;
  PartialTensorShape shape_;
};

class ReplicaVarHandleOp : public ReplicaOpBase {
 public:
  using ReplicaOpBase::ReplicaOpBase;

  void Compute(OpKernelContext* ctx) override {
    int64_t replica = 0;
    OP_REQUIRES_OK(ctx, ReplicaInput(ctx, 0, &replica));
    Var* var = nullptr;
    OP_REQUIRES_OK(ctx, Replica(ctx, replica, &var));
    var->Unref();  // the resource manager keeps it
    OP_REQUIRES_OK(ctx, OutputHandle(
                            ctx, 0, ctx->resource_manager()->default_container(),
                            ReplicaName(var_name_, replica), dtype_, shape_));
  }
};

class ReplicaVariableOp : public ReplicaOpBase {
 public:
  using ReplicaOpBase::ReplicaOpBase;

  void Compute(OpKernelContext* ctx) override {
    int64_t replica = 0;
    OP_REQUIRES_OK(ctx, ReplicaInput(ctx, 0, &replica));
    Var* var = nullptr;
    OP_REQUIRES_OK(ctx, Replica(ctx, replica, &var));
    // The resource manager keeps the Var, so the reference stays valid
    // while the session lives, as a VariableV2's does.
    ctx->set_output_ref(0, var->mu(), var->tensor());
    var->Unref();
  }
};

class ReplicaHandlesOp : public ReplicaOpBase {
 public:
  using ReplicaOpBase::ReplicaOpBase;

  void Compute(OpKernelContext* ctx) override {
    for (int64_t r = 0; r < num_replicas_; ++r) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, Replica(ctx, r, &var));
      var->Unref();
      OP_REQUIRES_OK(ctx, OutputHandle(
                              ctx, r, ctx->resource_manager()->default_container(),
                              ReplicaName(var_name_, r), dtype_, shape_));
    }
  }
};

class SetReplicasOp : public ReplicaOpBase {
 public:
  explicit SetReplicasOp(OpKernelConstruction* ctx) : ReplicaOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stacked", &stacked_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& value = ctx->input(0);
    const Tensor& replicas = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsVector(replicas.shape()),
                errors::InvalidArgument(name(), ": replicas must be a vector"));
    const auto ids = replicas.vec<int32_t>();
    for (int64_t i = 0; i < ids.size(); ++i) {
      OP_REQUIRES_OK(ctx, CheckReplica(ids(i)));
    }
    if (stacked_) {
      OP_REQUIRES(ctx,
                  value.dims() >= 1 && value.dim_size(0) == ids.size(),
                  errors::InvalidArgument(
                      name(), ": a stacked value needs one row per replica "
                      "listed, got shape ", value.shape().DebugString(),
                      " for ", ids.size(), " replicas"));
    }
    // Every copy is found before any is set: a failed call changes nothing.
    std::vector<tensorflow::core::RefCountPtr<Var>> vars;
    for (int64_t i = 0; i < ids.size(); ++i) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, Replica(ctx, ids(i), &var));
      vars.emplace_back(var);
    }
    for (int64_t i = 0; i < ids.size(); ++i) {
      Tensor copy = tensorflow::tensor::DeepCopy(
          stacked_ ? value.SubSlice(i) : value);
      tsl::mutex_lock lock(*vars[i]->mu());
      *vars[i]->tensor() = std::move(copy);
      vars[i]->is_initialized = true;
    }
  }

 private:
  bool stacked_ = false;
};

// The replicas' mean, summed in W (float for half precision) and rounded
// once.
template <typename T, typename W = T>
class MeanOf {
 public:
  void Add(const Tensor& value) {
    auto in = value.flat<T>();
    if (sum_.empty()) sum_.assign(in.size(), W(0));
    for (Index i = 0; i < in.size(); ++i) sum_[i] += static_cast<W>(in(i));
  }

  void Write(int64_t count, Tensor* out) const {
    auto o = out->flat<T>();
    for (Index i = 0; i < o.size(); ++i) {
      o(i) = static_cast<T>(sum_[i] / static_cast<W>(count));
    }
  }

 private:
  std::vector<W> sum_;
};

class ReplicaMeanOp : public ReplicaOpBase {
 public:
  explicit ReplicaMeanOp(OpKernelConstruction* ctx) : ReplicaOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mean", &mean_));
  }

  void Compute(OpKernelContext* ctx) override {
    switch (mean_ && num_replicas_ > 1 ? dtype_ : tensorflow::DT_INVALID) {
      case tensorflow::DT_HALF:
        return Mean<MeanOf<Eigen::half, float>>(ctx);
      case tensorflow::DT_BFLOAT16:
        return Mean<MeanOf<Eigen::bfloat16, float>>(ctx);
      case tensorflow::DT_FLOAT:
        return Mean<MeanOf<float>>(ctx);
      case tensorflow::DT_DOUBLE:
        return Mean<MeanOf<double>>(ctx);
      default:
        break;
    }
    int64_t source = 0;
    OP_REQUIRES_OK(ctx, ReplicaInput(ctx, 0, &source));
    Var* var = nullptr;
    OP_REQUIRES_OK(ctx, Replica(ctx, source, &var));
    tensorflow::core::ScopedUnref unref(var);
    tsl::tf_shared_lock lock(*var->mu());
    Tensor value;
    OP_REQUIRES_OK(ctx, Value(var, source, &value));
    ctx->set_output(0, tensorflow::tensor::DeepCopy(value));
  }

 private:
  template <typename Sum>
  void Mean(OpKernelContext* ctx) {
    Sum sum;
    Tensor* out = nullptr;
    for (int64_t r = 0; r < num_replicas_; ++r) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, Replica(ctx, r, &var));
      tensorflow::core::ScopedUnref unref(var);
      tsl::tf_shared_lock lock(*var->mu());
      Tensor value;
      OP_REQUIRES_OK(ctx, Value(var, r, &value));
      if (out == nullptr) {
        OP_REQUIRES_OK(ctx, ctx->allocate_output(0, value.shape(), &out));
      }
      OP_REQUIRES(ctx, value.shape() == out->shape(),
                  errors::InvalidArgument(
                      name(), ": the replicas of '", var_name_,
                      "' differ in shape: ", out->shape().DebugString(),
                      " and ", value.shape().DebugString()));
      sum.Add(value);
    }
    sum.Write(num_replicas_, out);
  }

  bool mean_ = true;
};

class StackReplicasOp : public ReplicaOpBase {
 public:
  using ReplicaOpBase::ReplicaOpBase;

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, tensorflow::DataTypeCanUseMemcpy(dtype_),
                errors::Unimplemented(name(), ": cannot stack replicas of ",
                                      tensorflow::DataTypeString(dtype_)));
    Tensor* out = nullptr;
    size_t row_bytes = 0;
    for (int64_t r = 0; r < num_replicas_; ++r) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, Replica(ctx, r, &var));
      tensorflow::core::ScopedUnref unref(var);
      tsl::tf_shared_lock lock(*var->mu());
      Tensor value;
      OP_REQUIRES_OK(ctx, Value(var, r, &value));
      if (out == nullptr) {
        TensorShape shape({num_replicas_});
        shape.AppendShape(value.shape());
        OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
        row_bytes = value.tensor_data().size();
      }
      OP_REQUIRES(ctx, value.tensor_data().size() == row_bytes,
                  errors::InvalidArgument(
                      name(), ": the replicas of '", var_name_,
                      "' differ in shape"));
      if (row_bytes > 0) {
        std::memcpy(const_cast<char*>(out->tensor_data().data()) +
                        r * row_bytes,
                    value.tensor_data().data(), row_bytes);
      }
    }
  }
};

// Local SGD's exchange (algorithms/local_sgd.py) in one pass over the
// elements: from the central model z (input 0) and the outer velocity v
// (input 1, a resource variable), per element
//   delta = z - mean_r w_r  (summed in replica order, as ReplicaMean)
//   v'    = momentum * v + delta
//   z'    = z - rate * (nesterov ? delta + momentum * v' : v')
// and then v = keep * v', every replica's copy = z', output z'. The
// copies and v are written in place unless something else holds their
// buffer. Every copy and v are locked for the pass.
template <typename T>
class LocalSgdExchangeOp : public ReplicaOpBase {
 public:
  explicit LocalSgdExchangeOp(OpKernelConstruction* ctx)
      : ReplicaOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("nesterov", &nesterov_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& z = ctx->input(0);
    T scalars[3];
    for (int i = 0; i < 3; ++i) {
      const Tensor& t = ctx->input(2 + i);
      OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(t.shape()),
                  errors::InvalidArgument(name(), ": rate, momentum and keep "
                                          "must be scalars"));
      scalars[i] = t.scalar<T>()();
    }
    tensorflow::core::RefCountPtr<Var> velocity;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(
                            ctx, tensorflow::HandleFromInput(ctx, 1),
                            &velocity));
    std::vector<tensorflow::core::RefCountPtr<Var>> copies;
    for (int64_t r = 0; r < num_replicas_; ++r) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, Replica(ctx, r, &var));
      copies.emplace_back(var);
    }
    std::vector<tsl::mutex*> mutexes = {velocity->mu()};
    for (auto& c : copies) mutexes.push_back(c->mu());
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()),
                  mutexes.end());
    for (tsl::mutex* mu : mutexes) mu->lock();
    const tensorflow::Status status = Exchange(ctx, z, velocity.get(),
                                               copies, scalars);
    for (auto it = mutexes.rbegin(); it != mutexes.rend(); ++it) {
      (*it)->unlock();
    }
    OP_REQUIRES_OK(ctx, status);
  }

 private:
  // A writable buffer for `var`'s tensor: its own, or a fresh one if
  // something else holds it (`copy`: keep the values).
  static tensorflow::Status Own(OpKernelContext* ctx, Var* var, bool copy) {
    Tensor* t = var->tensor();
    if (t->RefCountIsOne()) return absl::OkStatus();
    Tensor fresh;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &fresh));
    if (copy) fresh.flat<T>() = t->flat<T>();
    *t = fresh;
    return absl::OkStatus();
  }

  tensorflow::Status Exchange(
      OpKernelContext* ctx, const Tensor& z, Var* velocity,
      const std::vector<tensorflow::core::RefCountPtr<Var>>& copies,
      const T* scalars) {
    if (!velocity->is_initialized) {
      return errors::FailedPrecondition(name(), ": the outer velocity of '",
                                        var_name_, "' was never set");
    }
    if (velocity->tensor()->dtype() != dtype_ ||
        velocity->tensor()->shape() != z.shape()) {
      return errors::InvalidArgument(name(), ": the outer velocity of '",
                                     var_name_, "' is not a ",
                                     z.shape().DebugString(), " ",
                                     tensorflow::DataTypeString(dtype_));
    }
    for (int64_t r = 0; r < num_replicas_; ++r) {
      Tensor value;
      TF_RETURN_IF_ERROR(Value(copies[r].get(), r, &value));
      if (value.shape() != z.shape()) {
        return errors::InvalidArgument(
            name(), ": replica ", r, " of '", var_name_, "' is ",
            value.shape().DebugString(), ", the central model ",
            z.shape().DebugString());
      }
    }
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, z.shape(), &out));
    // Checked: nothing fails from here on.
    TF_RETURN_IF_ERROR(Own(ctx, velocity, true));
    std::vector<T*> w;
    for (auto& c : copies) {
      TF_RETURN_IF_ERROR(Own(ctx, c.get(), true));
      w.push_back(c->tensor()->flat<T>().data());
    }
    const T* zin = z.flat<T>().data();
    T* v = velocity->tensor()->flat<T>().data();
    T* zout = out->flat<T>().data();
    const T rate = scalars[0], momentum = scalars[1], keep = scalars[2];
    const T count = static_cast<T>(num_replicas_);
    const bool nesterov = nesterov_;
    const int64_t n = z.NumElements();
    ctx->eigen_cpu_device().parallelFor(
        n, Eigen::TensorOpCost(sizeof(T) * (2 + num_replicas_),
                               sizeof(T) * (2 + num_replicas_),
                               8 + num_replicas_),
        [&](Index first, Index last) {
          for (Index i = first; i < last; ++i) {
            T sum = T(0);
            for (T* wr : w) sum += wr[i];
            const T delta = zin[i] - sum / count;
            const T vv = momentum * v[i] + delta;
            const T zn = zin[i] - rate * (nesterov ? delta + momentum * vv
                                                   : vv);
            zout[i] = zn;
            v[i] = keep * vv;
            for (T* wr : w) wr[i] = zn;
          }
        });
    return absl::OkStatus();
  }

  bool nesterov_ = false;
};

// A resource variable of the home device (home_device.h) as a handle of
// this device: for the ops of a stream group pinned to a device of its own
// that update the central model.
class DeviceVarHandleOp : public OpKernel {
 public:
  explicit DeviceVarHandleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape_));
  }

  void Compute(OpKernelContext* ctx) override {
    ResourceMgr* home = HomeResourceManager(ctx);
    ResourceMgr* own = ctx->resource_manager();
    const std::string& home_container =
        container_.empty() ? home->default_container() : container_;
    const std::string& own_container =
        container_.empty() ? own->default_container() : container_;
    if (own != home) {
      Var* var = nullptr;
      OP_REQUIRES_OK(ctx, home->Lookup<Var>(home_container, shared_name_,
                                            &var));
      Var* alias = nullptr;
      OP_REQUIRES_OK(ctx, own->LookupOrCreate<Var>(
                              own_container, shared_name_, &alias,
                              [var](Var** r) {
                                var->Ref();
                                *r = var;
                                return absl::OkStatus();
                              }));
      alias->Unref();
      var->Unref();
    }
    OP_REQUIRES_OK(ctx, OutputHandle(ctx, 0, own_container, shared_name_,
                                     dtype_, shape_));
  }

 private:
  std::string container_;
  std::string shared_name_;
  DataType dtype_;
  PartialTensorShape shape_;
};

using tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(
    Name("TensorBowDeviceVarHandle").Device(DEVICE_CPU).HostMemory("resource"),
    DeviceVarHandleOp);
REGISTER_KERNEL_BUILDER(Name("TensorBowReplicaVarHandle")
                            .Device(DEVICE_CPU)
                            .HostMemory("replica")
                            .HostMemory("resource"),
                        ReplicaVarHandleOp);
REGISTER_KERNEL_BUILDER(
    Name("TensorBowReplicaVariable").Device(DEVICE_CPU).HostMemory("replica"),
    ReplicaVariableOp);
REGISTER_KERNEL_BUILDER(Name("TensorBowReplicaHandles")
                            .Device(DEVICE_CPU)
                            .HostMemory("handles"),
                        ReplicaHandlesOp);
REGISTER_KERNEL_BUILDER(
    Name("TensorBowSetReplicas").Device(DEVICE_CPU).HostMemory("replicas"),
    SetReplicasOp);
REGISTER_KERNEL_BUILDER(
    Name("TensorBowReplicaMean").Device(DEVICE_CPU).HostMemory("source"),
    ReplicaMeanOp);
REGISTER_KERNEL_BUILDER(Name("TensorBowStackReplicas").Device(DEVICE_CPU),
                        StackReplicasOp);
REGISTER_KERNEL_BUILDER(Name("TensorBowLocalSgdExchange")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<float>("dtype"),
                        LocalSgdExchangeOp<float>);
REGISTER_KERNEL_BUILDER(Name("TensorBowLocalSgdExchange")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<double>("dtype"),
                        LocalSgdExchangeOp<double>);

}  // namespace
}  // namespace tensorbow
