// The resource manager that every stream group's device shares.
//
// With several CPU devices (ConfigProto device_count), each device has a
// resource manager of its own, but a replica may be trained by any stream
// group. TensorBow's own state (replicas' copies, SMA's barriers) lives in
// the first CPU device's manager, its home, and is registered under the
// same name in the manager of any other device that uses it.
#ifndef TENSORBOW_CC_KERNELS_HOME_DEVICE_H_
#define TENSORBOW_CC_KERNELS_HOME_DEVICE_H_

#include "tensorflow/core/common_runtime/device_mgr.h"
#include "tensorflow/core/framework/device.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace tensorbow {

// The home resource manager: CPU:0's, or the device's own without a
// device manager (an op run outside a session).
inline tensorflow::ResourceMgr* HomeResourceManager(
    tensorflow::OpKernelContext* ctx) {
  tensorflow::FunctionLibraryRuntime* flr = ctx->function_library();
  if (flr == nullptr || flr->device_mgr() == nullptr) {
    return ctx->resource_manager();
  }
  tensorflow::Device* home = nullptr;
  for (tensorflow::Device* d : flr->device_mgr()->ListDevices()) {
    if (d->device_type() != "CPU") continue;
    // "...CPU:0" sorts first among a task's CPU devices.
    if (home == nullptr || d->name() < home->name()) home = d;
  }
  return home != nullptr ? home->resource_manager() : ctx->resource_manager();
}

// Looks `name` up in the home manager, making it with `creator` if it is
// missing, and registers it under the same name in this device's manager
// if that is another one. The caller unrefs *out.
template <typename T, typename Creator>
tensorflow::Status LookupOrCreateAtHome(tensorflow::OpKernelContext* ctx,
                                        const std::string& name, T** out,
                                        Creator creator) {
  tensorflow::ResourceMgr* home = HomeResourceManager(ctx);
  TF_RETURN_IF_ERROR(
      home->LookupOrCreate<T>(home->default_container(), name, out, creator));
  tensorflow::ResourceMgr* own = ctx->resource_manager();
  if (own != home) {
    T* shared = *out;
    T* alias = nullptr;
    TF_RETURN_IF_ERROR(own->LookupOrCreate<T>(
        own->default_container(), name, &alias, [shared](T** r) {
          shared->Ref();
          *r = shared;
          return absl::OkStatus();
        }));
    alias->Unref();
  }
  return absl::OkStatus();
}

}  // namespace tensorbow

#endif  // TENSORBOW_CC_KERNELS_HOME_DEVICE_H_
