"""The suite really runs in the TF1 mode it was asked for (conftest.py).

Each mode changes what TensorBow sees in a user's graph: the default
variable kind, what indexing a static shape gives, and the control-flow
ops; a run of the suite in the wrong mode would test neither.
"""
import tensorflow as tf


def test_mode_is_in_effect(tf_mode):
  assert not tf.executing_eagerly()
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    v = tf.compat.v1.get_variable("v", initializer=1.0)
  if tf_mode == "v1":
    assert isinstance(x.shape[0], tf.compat.v1.Dimension)
    assert tf.compat.dimension_value(x.shape[0]) is None
    assert v.op.type == "VariableV2"
    assert not tf.compat.v1.control_flow_v2_enabled()
  else:
    assert x.shape[0] is None
    assert v.op.type == "VarHandleOp"
    assert tf.compat.v1.control_flow_v2_enabled()
