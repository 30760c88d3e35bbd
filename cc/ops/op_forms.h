// The two forms of an op that updates variables, as TensorFlow's training
// ops come: `TensorBowApply...` over reference variables (`Ref(T)`, and the
// updated variable as its output) and `TensorBowResourceApply...` over
// resource handles (no output). Both are registered from one definition.
#ifndef TENSORBOW_CC_OPS_OP_FORMS_H_
#define TENSORBOW_CC_OPS_OP_FORMS_H_

#include <string>

#include "tensorflow/core/framework/op.h"

namespace tensorbow {

// Which variables one form of an op takes, and what follows from it.
class Form {
 public:
  explicit Form(bool ref) : ref_(ref) {}

  bool ref() const { return ref_; }

  // The spec of model-variable input `name`: a reference or a handle.
  std::string Variable(const char* name) const {
    return std::string(name) + (ref_ ? ": Ref(T)" : ": resource");
  }

  // The reference form's output, the updated variable (as TensorFlow's
  // Apply* ops have); the resource form has none.
  void RefOutput(tensorflow::register_op::OpDefBuilderWrapper& op) const {
    if (ref_) op.Output("out: Ref(T)");
  }

 private:
  bool ref_;
};

// Registers both forms of one op, `ref_name` over reference variables and
// `resource_name` over resource handles, each as `define` builds it.
inline bool RegisterPair(
    const char* ref_name, const char* resource_name,
    void (*define)(tensorflow::register_op::OpDefBuilderWrapper& op,
                   const Form& form)) {
  for (bool ref : {true, false}) {
    tensorflow::register_op::OpDefBuilderWrapper op(ref ? ref_name
                                                        : resource_name);
    define(op, Form(ref));
    op();
  }
  return true;
}

}  // namespace tensorbow

#endif  // TENSORBOW_CC_OPS_OP_FORMS_H_
