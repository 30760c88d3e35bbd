r"""Softmax (multinomial logistic) regression: the smallest reference model.

A TF1-style script, as a TensorBow user would write it: placeholders,
`tf.compat.v1.get_variable`, plain gradient descent. `build` makes the graph
(the tests build it directly); `main` trains it with the loop and flags
shared by the reference models (`models/training.py`, `models/flags.py`;
every flag: `--help`):

  python -m models.logistic_regression --session=tensorbow \
      --replicas=2 --batch_size=32 --epochs=5
  python -m models.logistic_regression --session=tf

Fashion-MNIST is the default data set; `--data=synthetic` needs no files.
"""

import numpy as np
import tensorflow as tf

from models import contract
from models import script

MODEL_NAME = "logistic_regression"
SYNTHETIC_IMAGE_SHAPE = (28, 28, 1)
DEFAULTS = dict(data="fashion_mnist", batch_size=32, learning_rate=0.1,
                epochs=5)


def build(image_shape, num_classes, learning_rate):
  """Builds softmax regression in the default graph.

  Args:
    image_shape: (height, width, channels) of an image.
    num_classes: the number of classes.
    learning_rate: gradient descent's learning rate.

  Returns:
    A namespace: x (float32 [None, *image_shape]), y (int64 [None]),
    training (boolean scalar, default False; unused by this model, there
    for the shared loop), logits, loss (mean cross-entropy), train_op, accuracy.
  """
  x, y, training = contract.model_inputs(image_shape)
  features = int(np.prod(image_shape))
  # Zeros are the usual start for a convex model: no symmetry to break.
  w = tf.compat.v1.get_variable(
      "softmax/w", [features, num_classes],
      initializer=tf.compat.v1.zeros_initializer())
  b = tf.compat.v1.get_variable(
      "softmax/b", [num_classes], initializer=tf.compat.v1.zeros_initializer())
  logits = tf.matmul(tf.reshape(x, [-1, features]), w) + b
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=logits))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(
      learning_rate).minimize(loss)
  return contract.model(x, y, training, logits, loss, train_op)


if __name__ == "__main__":
  script.run_script(build, MODEL_NAME, SYNTHETIC_IMAGE_SHAPE, DEFAULTS,
                    __doc__)
