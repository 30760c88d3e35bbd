// The runtime's own status type: a TensorFlow error code and a message.
//
// The scheduler knows neither TensorFlow nor Python; codes follow
// TF_Code / tf.errors so the binding can hand them on unchanged.
#ifndef TENSORBOW_CC_RUNTIME_STATUS_H_
#define TENSORBOW_CC_RUNTIME_STATUS_H_

#include <string>
#include <utility>

namespace tensorbow {
namespace runtime {

class Status {
 public:
  Status() = default;
  Status(int code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == 0; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_ = 0;  // 0 is OK, as in TF_Code.
  std::string message_;
};

// TF_Code values the runtime itself raises.
constexpr int kInvalidArgument = 3;
constexpr int kFailedPrecondition = 9;
constexpr int kInternal = 13;

}  // namespace runtime
}  // namespace tensorbow

#endif  // TENSORBOW_CC_RUNTIME_STATUS_H_
