"""What a reference model hands the training loop (models/training.py).

The scripts `models/logistic_regression.py`, `models/mlp.py`,
`models/lenet.py` and `models/resnet32.py` each build a TF1 graph
(placeholders, variables, an optimizer's train op) in their
`build(image_shape, num_classes, learning_rate)` and return a namespace
(`model`) with at least:
  x: float32 placeholder [None, height, width, channels], the images.
  y: int64 placeholder [None], the labels.
  training: a boolean scalar, False by default
    (`tf.compat.v1.placeholder_with_default(False, [])`); training steps
    feed True, evaluation leaves it False. It is not a batch feed (rank 0),
    so under TensorBow every replica gets it whole.
  loss: the scalar training loss.
  train_op: the optimizer's op; it must depend (tf.control_dependencies) on
    whatever the model needs run each step, such as batch norm's
    tf.compat.v1.GraphKeys.UPDATE_OPS.
  accuracy: the scalar fraction of correct predictions in a batch.
"""
import types

import tensorflow as tf


def model_inputs(image_shape):
  """The placeholders every model takes (see the module docstring).

  Args:
    image_shape: (height, width, channels) of an image.

  Returns:
    (x, y, training): float32 images [None, *image_shape], int64 labels
    [None], and the boolean training flag, False unless fed.
  """
  shape = [None] + [int(d) for d in image_shape]
  x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
  y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
  training = tf.compat.v1.placeholder_with_default(False, [], name="training")
  return x, y, training


def model(x, y, training, logits, loss, train_op, **extra):
  """The namespace a model's `build` returns, its batch accuracy added.

  Args:
    x, y, training: `model_inputs`.
    logits: [None, num_classes].
    loss: the scalar training loss.
    train_op: the optimizer's op.
    **extra: more tensors the model exposes.

  Returns:
    A `types.SimpleNamespace` with those fields and `accuracy`.
  """
  accuracy = tf.reduce_mean(
      tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
  return types.SimpleNamespace(x=x, y=y, training=training, logits=logits,
                               loss=loss, train_op=train_op,
                               accuracy=accuracy, **extra)


def train_feed(net, x, y):
  """The feed of one training step of model `net`: the batch, in training
  mode."""
  return {net.x: x, net.y: y, net.training: True}
