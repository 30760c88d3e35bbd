r"""LeNet-5-like CNN: the reference model of Crossbow's MNIST experiments.

conv 5x5x32 (SAME) + ReLU + max-pool 2, conv 5x5x64 (SAME) + ReLU + max-pool
2, fully connected 512 + ReLU, fully connected to the classes; momentum SGD.
The same network as `benchmarks/lenet_throughput.py`, as a TF1-style
script: `build` makes the graph (the tests build it directly), `main` trains
it with the loop and flags shared by the reference models
(`models/training.py`, `models/flags.py`; every flag: `--help`):

  python -m models.lenet --session=tensorbow --replicas=3 \
      --batch_size=4 --target_accuracy=0.9
  python -m models.lenet --session=tf --batch_size=16

Fashion-MNIST is the default data set (`--data=mnist --data_dir=DIR` for the
report's MNIST runs); `--data=synthetic` needs no files.
"""

import tensorflow as tf

from models import contract
from models import script

MODEL_NAME = "lenet"
SYNTHETIC_IMAGE_SHAPE = (28, 28, 1)
DEFAULTS = dict(data="fashion_mnist", batch_size=32, learning_rate=0.01,
                epochs=5)


def _weight(name, shape):
  return tf.compat.v1.get_variable(
      name, shape,
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1))


def _bias(name, size):
  # A small positive bias keeps the ReLUs alive at the start.
  return tf.compat.v1.get_variable(
      name, [size], initializer=tf.compat.v1.constant_initializer(0.1))


def build(image_shape, num_classes, learning_rate):
  """Builds the CNN in the default graph.

  Args:
    image_shape: (height, width, channels) of an image; height and width
      need not be multiples of 4 (SAME pooling rounds up).
    num_classes: the number of classes.
    learning_rate: momentum SGD's learning rate (momentum 0.9).

  Returns:
    A namespace: x (float32 [None, *image_shape]), y (int64 [None]),
    training (boolean scalar, default False; unused by this model, there
    for the shared loop), logits, loss (mean cross-entropy), train_op, accuracy.
  """
  channels = int(image_shape[-1])
  x, y, training = contract.model_inputs(image_shape)
  h = tf.nn.relu(tf.nn.conv2d(x, _weight("conv1/w", [5, 5, channels, 32]),
                              strides=1, padding="SAME") + _bias("conv1/b", 32))
  h = tf.nn.max_pool2d(h, 2, 2, "SAME")
  h = tf.nn.relu(tf.nn.conv2d(h, _weight("conv2/w", [5, 5, 32, 64]),
                              strides=1, padding="SAME") + _bias("conv2/b", 64))
  h = tf.nn.max_pool2d(h, 2, 2, "SAME")
  features = h.shape[1:].num_elements()
  h = tf.reshape(h, [-1, features])
  h = tf.nn.relu(tf.matmul(h, _weight("fc1/w", [features, 512])) +
                 _bias("fc1/b", 512))
  logits = (tf.matmul(h, _weight("fc2/w", [512, num_classes])) +
            _bias("fc2/b", num_classes))
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=logits))
  train_op = tf.compat.v1.train.MomentumOptimizer(
      learning_rate, 0.9).minimize(loss)
  return contract.model(x, y, training, logits, loss, train_op)


if __name__ == "__main__":
  script.run_script(build, MODEL_NAME, SYNTHETIC_IMAGE_SHAPE, DEFAULTS,
                    __doc__)
