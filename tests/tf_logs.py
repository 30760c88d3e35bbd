"""What the tests look for in TensorFlow's own log of a child process."""

# TensorFlow's warning that an op was changed after a session ran it
# ("will trigger an error in the future"); its C++ logs it at WARNING, so
# a child whose output is searched for it must log warnings.
OP_MUTATION = "was changed by setting attribute after it was run"
WARNINGS_LOGGED = {"TF_CPP_MIN_LOG_LEVEL": "1"}
