r"""A dense multi-layer perceptron: two hidden layers of 256 ReLUs.

The stand-in for the fully connected networks of Adaptive SGD's
experiments (Ma, Rusu, Wu and Sim), on images flattened to vectors; plain
gradient descent, whose learning rate Adaptive SGD scales per replica.
As the other reference models, `build` makes the graph and `main` trains
it with the shared loop and flags (`models/training.py`,
`models/flags.py`; every flag: `--help`):

  python -m models.mlp --session=tensorbow --replicas=2 --batch_size=16
  python -m models.mlp --session=tf --batch_size=32

Fashion-MNIST is the default data set; `--data=synthetic` needs no files.
"""

import numpy as np
import tensorflow as tf

from models import contract
from models import script

MODEL_NAME = "mlp"
SYNTHETIC_IMAGE_SHAPE = (28, 28, 1)
DEFAULTS = dict(data="fashion_mnist", batch_size=32, learning_rate=0.05,
                epochs=5)
HIDDEN = (256, 256)


def build(image_shape, num_classes, learning_rate):
  """Builds the MLP in the default graph.

  Args:
    image_shape: (height, width, channels) of an image.
    num_classes: the number of classes.
    learning_rate: gradient descent's learning rate.

  Returns:
    A namespace: x (float32 [None, *image_shape]), y (int64 [None]),
    training (boolean scalar, default False; unused by this model, there
    for the shared loop), logits, loss (mean cross-entropy), train_op,
    accuracy.
  """
  x, y, training = contract.model_inputs(image_shape)
  width = int(np.prod(image_shape))
  h = tf.reshape(x, [-1, width])
  for i, units in enumerate(HIDDEN + (num_classes,)):
    w = tf.compat.v1.get_variable(f"dense{i}/w", [width, units])
    b = tf.compat.v1.get_variable(
        f"dense{i}/b", [units], initializer=tf.compat.v1.zeros_initializer())
    h = tf.matmul(h, w) + b
    if i < len(HIDDEN):
      h = tf.nn.relu(h)
    width = units
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=h))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(
      learning_rate).minimize(loss)
  return contract.model(x, y, training, h, loss, train_op)


if __name__ == "__main__":
  script.run_script(build, MODEL_NAME, SYNTHETIC_IMAGE_SHAPE, DEFAULTS,
                    __doc__)
