// A feed as the runtime hands it to TensorFlow: a host buffer borrowed
// for one run, or strings.
//
// Plain C++: the binding makes them from NumPy arrays, the wave runner
// cuts and adds to them, tf_adapter.cc turns them into TF_Tensors.
#ifndef TENSORBOW_CC_RUNTIME_HOST_TENSOR_H_
#define TENSORBOW_CC_RUNTIME_HOST_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tensorbow {
namespace runtime {

// The TF_DataType values the runtime itself makes or reads.
constexpr int kTfInt32 = 3;   // TF_INT32
constexpr int kTfString = 7;  // TF_STRING

// A host buffer to feed, borrowed for the duration of one run. For strings
// (TF_STRING), `strings` holds the elements and `data` is unused.
struct HostTensor {
  int dtype = 0;  // TF_DataType
  std::vector<int64_t> dims;
  void* data = nullptr;
  size_t nbytes = 0;
  std::vector<std::string> strings;
};

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_HOST_TENSOR_H_
