r"""ResNet-32 for CIFAR-10 (He et al., 2016, section 4.2), written for TF1.

The network of the TensorBow report's ResNet-32 experiments: a 3x3
convolution with 16 filters, then 3 stages of 5 basic blocks (two 3x3
convolutions each) with 16, 32 and 64 filters, the first block of stages 2
and 3 halving the feature map (stride 2), global average pooling and a fully
connected layer to the classes: 31 convolutions + 1 fc = 32 layers, about
0.46 M trainable parameters on 32x32x3 images. Shortcuts are identities;
where a stage changes the shape they subsample and pad the new channels
with zeros (the paper's option A, no parameters) or, with `shortcut="B"`,
project with a 1x1 convolution and batch norm.

Batch norm is written out with `tf.nn.moments` and
`tf.nn.batch_normalization` (Keras layers are not available): gamma and beta
are trainable; the moving mean and variance are non-trainable variables
updated by assign ops in `tf.compat.v1.GraphKeys.UPDATE_OPS`, which the
train op depends on. `training` (a boolean placeholder, default False)
chooses the batch's statistics (training) or the moving ones (evaluation)
with `tf.cond`. Under TensorBow the moving statistics are per replica and
the user-named ones their mean (DESIGN.md, "State").

Optimizer: momentum SGD (0.9) with L2 weight decay 1e-4 on the
convolution and fc kernels, as in the paper. `main` trains with the loop and
flags shared by the reference models (`models/training.py`,
`models/flags.py`; every flag: `--help`):

  python -m models.resnet32 --data=cifar10 \
      --data_dir=/path/to/cifar-10-batches-py --session=tensorbow \
      --replicas=2 --batch_size=32
  python -m models.resnet32 --data=synthetic --max_steps=50
"""

import tensorflow as tf

from models import contract
from models import script

MODEL_NAME = "resnet32"
SYNTHETIC_IMAGE_SHAPE = (32, 32, 3)
DEFAULTS = dict(data="cifar10", batch_size=32, learning_rate=0.1, epochs=10)

STAGE_FILTERS = (16, 32, 64)
BLOCKS_PER_STAGE = 5  # 6 n + 2 layers with n = 5: ResNet-32.
# Moving statistics: new = DECAY * old + (1 - DECAY) * batch. 0.9 follows
# the batch quickly enough for short runs (a few hundred steps an epoch).
BN_DECAY = 0.9
BN_EPSILON = 1e-5


def _conv(h, filters, kernel, stride, name):
  """A convolution without bias (the batch norm after it has a beta)."""
  kernel = tf.compat.v1.get_variable(
      name + "/kernel", [kernel, kernel, int(h.shape[-1]), filters],
      # He initialisation, the paper's.
      initializer=tf.compat.v1.variance_scaling_initializer(
          scale=2.0, mode="fan_in", distribution="truncated_normal"))
  tf.compat.v1.add_to_collection("resnet_kernels", kernel)
  return tf.nn.conv2d(h, kernel, strides=stride, padding="SAME")


def _batch_norm(h, training, name):
  """Batch norm over N, H, W with moving statistics for evaluation.

  Args:
    h: [N, H, W, C].
    training: boolean scalar: normalise with the batch's statistics (and let
      the UPDATE_OPS move the moving ones) or with the moving ones.
    name: the variable scope.

  Returns:
    The normalised, scaled and shifted `h`.
  """
  channels = int(h.shape[-1])
  with tf.compat.v1.variable_scope(name):
    gamma = tf.compat.v1.get_variable(
        "gamma", [channels], initializer=tf.compat.v1.ones_initializer())
    beta = tf.compat.v1.get_variable(
        "beta", [channels], initializer=tf.compat.v1.zeros_initializer())
    moving_mean = tf.compat.v1.get_variable(
        "moving_mean", [channels],
        initializer=tf.compat.v1.zeros_initializer(), trainable=False)
    moving_variance = tf.compat.v1.get_variable(
        "moving_variance", [channels],
        initializer=tf.compat.v1.ones_initializer(), trainable=False)
  mean, variance = tf.nn.moments(h, [0, 1, 2])
  # Not under the caller's control dependencies: the train op runs these.
  with tf.control_dependencies(None):
    for moving, batch in ((moving_mean, mean), (moving_variance, variance)):
      update = moving.assign(BN_DECAY * moving + (1.0 - BN_DECAY) * batch,
                             read_value=False)
      tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                     update)
  # The moving statistics are read outside the cond, so the cond's branches
  # only pick between tensors.
  mean, variance = tf.cond(
      training, lambda: (tf.identity(mean), tf.identity(variance)),
      lambda: (tf.identity(moving_mean), tf.identity(moving_variance)))
  return tf.nn.batch_normalization(h, mean, variance, beta, gamma,
                                   BN_EPSILON)


def _shortcut(h, filters, stride, training, option, name):
  """The block's shortcut: identity, or option A / B where the shape changes."""
  if stride == 1 and int(h.shape[-1]) == filters:
    return h
  if option == "A":
    # Subsample as the stride-2 convolution does (TensorFlow's SAME keeps
    # the even positions), then zero channels on both sides.
    h = h[:, ::stride, ::stride, :]
    extra = filters - int(h.shape[-1])
    return tf.pad(h, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])
  return _batch_norm(_conv(h, filters, 1, stride, name + "/projection"),
                     training, name + "/projection/bn")


def _block(h, filters, stride, training, shortcut, name):
  """A basic block: conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU."""
  residual = tf.nn.relu(_batch_norm(_conv(h, filters, 3, stride,
                                          name + "/conv1"),
                                    training, name + "/bn1"))
  residual = _batch_norm(_conv(residual, filters, 3, 1, name + "/conv2"),
                         training, name + "/bn2")
  return tf.nn.relu(residual +
                    _shortcut(h, filters, stride, training, shortcut, name))


def build(image_shape, num_classes, learning_rate, shortcut="A",
          blocks_per_stage=BLOCKS_PER_STAGE, weight_decay=1e-4,
          momentum=0.9):
  """Builds ResNet-(6 n + 2) in the default graph; n = 5 is ResNet-32.

  Args:
    image_shape: (height, width, channels) of an image (CIFAR-10: 32x32x3).
    num_classes: the number of classes.
    learning_rate: momentum SGD's learning rate.
    shortcut: "A" (zero-padding, parameter-free) or "B" (1x1 projection)
      where a stage changes the shape.
    blocks_per_stage: n, basic blocks per stage.
    weight_decay: the L2 factor on kernels (the gradient gets
      weight_decay * kernel).
    momentum: the optimizer's momentum.

  Returns:
    A namespace: x (float32 [None, *image_shape]), y (int64 [None]),
    training (boolean scalar, default False; feed True to train), logits,
    cross_entropy (its mean), loss (cross_entropy + weight decay), train_op
    (runs the batch-norm updates too), accuracy.

  Raises:
    ValueError: an unknown `shortcut`.
  """
  if shortcut not in ("A", "B"):
    raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")
  # Evaluation is the default, so a bare run of `logits` does not depend on
  # the batch; the training loop feeds True.
  x, y, training = contract.model_inputs(image_shape)
  kernels_before = len(tf.compat.v1.get_collection("resnet_kernels"))

  h = tf.nn.relu(_batch_norm(_conv(x, STAGE_FILTERS[0], 3, 1, "conv1"),
                             training, "conv1/bn"))
  for stage, filters in enumerate(STAGE_FILTERS):
    for block in range(blocks_per_stage):
      stride = 2 if stage > 0 and block == 0 else 1
      h = _block(h, filters, stride, training, shortcut,
                 f"stage{stage + 1}/block{block + 1}")
  h = tf.reduce_mean(h, axis=[1, 2])  # Global average pooling.
  fc_w = tf.compat.v1.get_variable(
      "fc/kernel", [int(h.shape[-1]), num_classes],
      initializer=tf.compat.v1.variance_scaling_initializer(
          scale=1.0, mode="fan_in", distribution="truncated_normal"))
  fc_b = tf.compat.v1.get_variable(
      "fc/bias", [num_classes], initializer=tf.compat.v1.zeros_initializer())
  logits = tf.matmul(h, fc_w) + fc_b

  cross_entropy = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  kernels = tf.compat.v1.get_collection("resnet_kernels")[kernels_before:]
  decay = weight_decay * tf.add_n([tf.nn.l2_loss(k) for k in kernels + [fc_w]])
  loss = cross_entropy + decay
  update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
  with tf.control_dependencies(update_ops):
    train_op = tf.compat.v1.train.MomentumOptimizer(
        learning_rate, momentum).minimize(loss)
  return contract.model(x, y, training, logits, loss, train_op,
                        cross_entropy=cross_entropy)


if __name__ == "__main__":
  script.run_script(build, MODEL_NAME, SYNTHETIC_IMAGE_SHAPE, DEFAULTS,
                    __doc__)
