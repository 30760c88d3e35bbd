"""The source of a generated TF1 script (issue #61): the building blocks
a seed's choices name (tests/idioms/generator.py), written out as
`build()`, which makes the graph in the default graph and returns a
`Program`-shaped dict:

* fetches / plain_fetches: what a training and a plain run fetch;
* feed(i, ctx): the feed_dict of run i, only the tensors fed in that run;
* prepare(sess) -> ctx: what runs after the initializers (a queue's
  enqueue, an iterator's string handles, a `make_callable`);
* run(sess, kind, i, ctx): run i of kind "train", "plain", "save" or
  "restore", returning what it fetched ({} for a save or a restore);
* saved: the names of the variables the Saver saves (or None).

Every block is written as a TF1 user writes it, with
`tf.compat.v1.get_variable` and `tf.nn` (Keras 3 has no TF1 layers).
"""
import textwrap

BATCH = 8  # rows of a batch: 2 per replica at L = 4 (harness.BATCH)
CLASSES = 3
PIPELINE_ROWS = 128  # a pipeline's rows: more than any schedule pulls

# Optimizer choice -> its constructor, `{lr}` the rate.
OPTIMIZERS = {
    "GradientDescent": "tf.compat.v1.train.GradientDescentOptimizer({lr})",
    "Momentum": "tf.compat.v1.train.MomentumOptimizer({lr}, 0.9)",
    "Adam": "tf.compat.v1.train.AdamOptimizer({lr})",
    "Adagrad": "tf.compat.v1.train.AdagradOptimizer({lr})",
    "RMSProp": "tf.compat.v1.train.RMSPropOptimizer({lr})",
    "Adadelta": "tf.compat.v1.train.AdadeltaOptimizer({lr})",
    "AdagradDA": ("tf.compat.v1.train.AdagradDAOptimizer(\n"
                  "    {lr}, tf.compat.v1.train.get_or_create_global_step())"),
    "Ftrl": "tf.compat.v1.train.FtrlOptimizer({lr})",
    "ProximalGradientDescent": (
        "tf.compat.v1.train.ProximalGradientDescentOptimizer(\n"
        "    {lr}, l1_regularization_strength=0.001)"),
    "ProximalAdagrad": "tf.compat.v1.train.ProximalAdagradOptimizer({lr})",
    "UserAssign": "UserOptimizer({lr}, 'assign')",
    "UserAssignSub": "UserOptimizer({lr}, 'assign_sub')",
}
RATES = {"GradientDescent": 0.2, "Momentum": 0.1, "Adam": 0.05,
         "Adagrad": 0.2, "RMSProp": 0.02, "Adadelta": 1.0,
         "AdagradDA": 0.2, "Ftrl": 0.2, "ProximalGradientDescent": 0.2,
         "ProximalAdagrad": 0.2, "UserAssign": 0.2, "UserAssignSub": 0.2}

HELPERS = '''\
def dense(h, n_in, units, name, activation=None):
  with tf.compat.v1.variable_scope(name):
    w = tf.compat.v1.get_variable(
        "w", [n_in, units],
        initializer=tf.compat.v1.glorot_uniform_initializer(seed=42))
    b = tf.compat.v1.get_variable(
        "b", [units], initializer=tf.compat.v1.constant_initializer(0.1))
  out = tf.matmul(h, w) + b
  return activation(out) if activation else out


def batch_norm(h, size, training):
  """Batch norm by hand: batch statistics while `training` (a bool or a
  boolean tensor), moving ones otherwise; the moving ones' updates go to
  UPDATE_OPS, which the train op waits for."""
  with tf.compat.v1.variable_scope("bn"):
    gamma = tf.compat.v1.get_variable("gamma", [size],
                                      initializer=tf.ones_initializer())
    beta = tf.compat.v1.get_variable("beta", [size],
                                     initializer=tf.zeros_initializer())
    moving_mean = tf.compat.v1.get_variable(
        "moving_mean", [size], initializer=tf.zeros_initializer(),
        trainable=False)
    moving_var = tf.compat.v1.get_variable(
        "moving_variance", [size], initializer=tf.ones_initializer(),
        trainable=False)
  mean, var = tf.nn.moments(h, [0])
  for moving, value in ((moving_mean, mean), (moving_var, var)):
    tf.compat.v1.add_to_collection(
        tf.compat.v1.GraphKeys.UPDATE_OPS,
        moving.assign(0.9 * moving + 0.1 * value))
  if training is True:
    mean_used, var_used = mean, var
  else:
    mean_used, var_used = tf.cond(
        training, lambda: (mean, var),
        lambda: (tf.identity(moving_mean), tf.identity(moving_var)))
  return tf.nn.batch_normalization(h, mean_used, var_used, beta, gamma,
                                   1e-3)


class UserOptimizer(tf.compat.v1.train.Optimizer):
  """SGD written as users write an optimizer: the step taken with
  `assign` (var - step) or `assign_sub`, rows of a sparse gradient with
  scatter_sub."""

  def __init__(self, rate, how):
    super().__init__(False, "UserOptimizer")
    self._rate, self._how = rate, how

  def _step(self, var, grad):
    rate = tf.cast(self._rate, var.dtype.base_dtype)
    if self._how == "assign":
      return var.assign(var - rate * grad)
    return var.assign_sub(rate * grad)

  def _apply_dense(self, grad, var):
    return self._step(var, grad)

  def _resource_apply_dense(self, grad, handle):
    return self._step(handle, grad)

  def _apply_sparse(self, grad, var):
    rate = tf.cast(self._rate, var.dtype.base_dtype)
    return tf.compat.v1.scatter_sub(var, grad.indices, rate * grad.values)

  def _resource_apply_sparse(self, grad, handle, indices):
    rate = tf.cast(self._rate, handle.dtype.base_dtype)
    return handle.scatter_sub(tf.IndexedSlices(rate * grad, indices))
'''


def _placeholder(kind, dtype, row_shape, name):
  if kind == "shapeless":
    return f'tf.compat.v1.placeholder({dtype}, name="{name}")'
  first = "None" if kind == "none_batch" else str(BATCH)
  shape = ", ".join([first] + [str(d) for d in row_shape])
  return f'tf.compat.v1.placeholder({dtype}, [{shape}], name="{name}")'


# model choice -> (x's dtype, x's row shape, NumPy rows of x: `{n}` rows
# from RandomState `rng`).
_INPUTS = {
    "dense": ("tf.float32", [4], "rng.randn({n}, 4).astype(np.float32)"),
    "conv": ("tf.float32", [4, 4, 1],
             "rng.randn({n}, 4, 4, 1).astype(np.float32)"),
    "embedding": ("tf.int32", [3],
                  "rng.randint(0, 10, ({n}, 3)).astype(np.int32)"),
}
_INPUTS["partitioned_embedding"] = _INPUTS["embedding"]
_LABELS = "rng.randint(0, %d, {n}).astype(np.int64)" % CLASSES


class _Writer(object):
  """The lines of build()'s body, and what its runs feed."""

  def __init__(self, choices):
    self.c = choices
    self.lines = []
    self.feeds = {}  # feed key expression -> value expression of i, ctx
    self.fetches = {}
    self.call_keys = []  # tensors every training run feeds
    self.prepare = []  # lines of prepare(sess), ctx in scope

  def add(self, line):
    self.lines.append(line)


def _inputs(w):
  """x and labels: fed, or from a tf.data iterator, a feedable iterator
  or a queue."""
  c = w.c
  dtype, row_shape, rows = _INPUTS[c["model"]]
  pipeline = c["pipeline"]
  if pipeline is None:
    kind = c["feed"]
    name = "ids" if "embedding" in c["model"] else "x"
    w.add(f"x = {_placeholder(kind, dtype, row_shape, name)}")
    w.add(f"labels = {_placeholder(kind, 'tf.int64', [], 'labels')}")
    w.feeds["x"] = rows.format(n=BATCH)
    w.feeds["labels"] = _LABELS.format(n=BATCH)
    w.call_keys += ["x", "labels"]
    return
  w.add("def dataset(seed):")
  w.add("  rng = np.random.RandomState(seed)")
  w.add(f"  data = ({rows.format(n=PIPELINE_ROWS)},")
  w.add(f"          {_LABELS.format(n=PIPELINE_ROWS)})")
  if pipeline == "queue":
    w.add("  return data")
    w.add(f"queue = tf.compat.v1.FIFOQueue({2 * PIPELINE_ROWS}, "
          f"[{dtype}, tf.int64], shapes=[{row_shape}, []])")
    w.add("enqueue = queue.enqueue_many(dataset(77))")
    w.add(f"x, labels = queue.dequeue_up_to({BATCH})")
    w.prepare.append("sess.run(enqueue)")
    return
  w.add("  return tf.data.Dataset.from_tensor_slices(data).repeat()"
        f".batch({BATCH})")
  if pipeline == "dataset":
    w.add("iterator = tf.compat.v1.data.make_one_shot_iterator("
          "dataset(77))")
    w.add("x, labels = iterator.get_next()")
    return
  w.add("training_data, evaluation_data = dataset(77), dataset(78)")
  w.add("handle = tf.compat.v1.placeholder(tf.string, [], name='handle')")
  w.add("iterator = tf.compat.v1.data.Iterator.from_string_handle(")
  w.add("    handle, tf.compat.v1.data.get_output_types(training_data),")
  w.add("    tf.compat.v1.data.get_output_shapes(training_data))")
  w.add("x, labels = iterator.get_next()")
  w.add("handles = [tf.compat.v1.data.make_one_shot_iterator(d)"
        ".string_handle()")
  w.add("           for d in (training_data, evaluation_data)]")
  w.prepare.append("ctx['handles'] = sess.run(handles)")
  w.feeds["handle"] = "ctx['handles'][1 if i in PLAIN else 0]"
  w.call_keys.append("handle")


def _model(w):
  """h, the model's hidden features, and its width."""
  c = w.c
  if c["model"] == "dense":
    w.add("h = dense(x, 4, 5, 'hidden', tf.tanh)")
    width = 5
  elif c["model"] == "conv":
    w.add("with tf.compat.v1.variable_scope('conv'):")
    w.add("  kernel = tf.compat.v1.get_variable(")
    w.add("      'w', [3, 3, 1, 2],")
    w.add("      initializer=tf.compat.v1.glorot_uniform_initializer("
          "seed=42))")
    w.add("h = tf.nn.relu(tf.nn.conv2d(x, kernel, [1, 1, 1, 1], 'SAME'))")
    w.add("h = tf.nn.max_pool2d(h, 2, 2, 'VALID')")
    w.add("h = tf.reshape(h, [-1, 8])")
    width = 8
  else:
    partitioner = (",\n    partitioner=tf.compat.v1.fixed_size_partitioner(2)"
                   if c["model"] == "partitioned_embedding" else "")
    w.add("table = tf.compat.v1.get_variable(")
    w.add("    'embedding', [10, 4],")
    w.add("    initializer=tf.compat.v1.random_uniform_initializer("
          f"seed=42){partitioner})")
    w.add("h = tf.reduce_mean(tf.nn.embedding_lookup(table, x), 1)")
    width = 4
  if c["loop"]:
    w.add(f"w_loop = tf.compat.v1.get_variable('loop/w', [{width}, {width}],")
    w.add("    initializer=tf.compat.v1.glorot_uniform_initializer(seed=42))")
    w.add("_, h = tf.while_loop(")
    w.add("    lambda i, h: i < 2,")
    w.add("    lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w_loop))),")
    w.add("    [tf.constant(0), h])")
  if c["cond"]:
    w.add("flag = tf.compat.v1.placeholder_with_default(True, [], "
          "name='flag')")
    w.add("h = tf.cond(flag, lambda: tf.nn.relu(h), lambda: 0.5 * h)")
    w.feeds["flag"] = "False if i % 2 else None"
  if c["batch_norm"] == "training":
    w.add(f"h = batch_norm(h, {width}, True)")
  elif c["batch_norm"] == "is_training":
    w.add("is_training = tf.compat.v1.placeholder_with_default(")
    w.add("    True, [], name='is_training')")
    w.add(f"h = batch_norm(h, {width}, is_training)")
    w.feeds["is_training"] = "False if i in PLAIN else None"
  if c["dropout"] == "fixed":
    w.add("h = tf.nn.dropout(h, rate=0.25, seed=7)")
  elif c["dropout"] == "fed_rate":
    w.add("rate = tf.compat.v1.placeholder_with_default(0.25, [], "
          "name='dropout_rate')")
    w.add("h = tf.nn.dropout(h, rate=rate, seed=7)")
    w.feeds["rate"] = "0.0 if i in PLAIN else None"
  w.add(f"logits = dense(h, {width}, {CLASSES}, 'out')")


_LOSSES = {
    "mean": "tf.reduce_mean(xent)",
    "sum": "tf.reduce_sum(xent)",
    "weighted": ("tf.compat.v1.losses.sparse_softmax_cross_entropy(\n"
                 "    labels, logits,\n"
                 "    weights=tf.gather(tf.constant([1.0, 2.0, 0.5]), "
                 "labels))"),
    "two_summed": ("tf.reduce_mean(xent) + 0.01 * tf.add_n(\n"
                   "    [tf.nn.l2_loss(v) for v in "
                   "tf.compat.v1.trainable_variables()])"),
}


def _loss_and_metrics(w):
  c = w.c
  w.add("xent = tf.nn.sparse_softmax_cross_entropy_with_logits(")
  w.add("    labels=labels, logits=logits)")
  w.add(f"loss = {_LOSSES[c['loss']]}")
  if c["hyper"] == "loss_scale":
    w.add("scale = tf.compat.v1.placeholder_with_default(1.0, [], "
          "name='scale')")
    w.add("loss = scale * loss")
    w.feeds["scale"] = f"0.0 if i in {c['hyper_runs']} else None"
  w.fetches["loss"] = "loss"
  if c["metric"] == "mean":
    w.add("_, metric = tf.compat.v1.metrics.mean(xent, name='mean_xent')")
  elif c["metric"] == "accuracy":
    w.add("_, metric = tf.compat.v1.metrics.accuracy(")
    w.add("    labels, tf.argmax(logits, 1), name='accuracy')")
  if c["metric"] is not None:
    w.fetches["metric"] = "metric"
  if c["extra_fetches"]:
    w.add("correct = tf.reduce_sum(tf.cast(")
    w.add("    tf.equal(tf.argmax(logits, 1), labels), tf.int32))")
    w.fetches["correct"] = "correct"
    w.fetches["logits"] = "logits"
    w.fetches["rows"] = "tf.shape(labels)[0]"


def _counters(w):
  """The assign_adds of the row and step counters chosen."""
  counters = []
  for counter, amount in (("rows", "tf.shape(x)[0]"), ("steps", "1")):
    dtype = w.c[f"{counter}_counter"]
    if dtype is None:
      continue
    w.add(f"{counter} = tf.compat.v1.get_variable(")
    w.add(f"    '{counter}_{dtype}', [], tf.{dtype}, trainable=False,")
    w.add("    initializer=tf.compat.v1.zeros_initializer())")
    value = amount if amount == "1" else f"tf.cast({amount}, tf.{dtype})"
    counters.append(f"{counter}.assign_add({value})")
  return counters


_TRANSFORMS = {
    "clip_global_norm": "grads, _ = tf.clip_by_global_norm(grads, 1.0)",
    "clip_by_value": "grads = [tf.clip_by_value(g, -0.1, 0.1) for g in "
                     "grads]",
    # A lookup's gradient is IndexedSlices, which has no product.
    "scale": "grads = [tf.math.scalar_mul(0.5, g) for g in grads]",
}


def _step(w, var_list, step_args):
  """Lines of the optimizers' steps, as `train_steps.append(...)`: one
  optimizer over `var_list` (an expression, or None: every trainable
  variable), or with a second one the output layer's gradients applied
  by the first and the others' by the second. The gradients are computed
  once: two `minimize` calls would each compute their own, and one
  optimizer's step could write a weight the other's backward pass still
  reads (TensorFlow's own race); and the second applies after the
  first, taking the global step."""
  c = w.c
  args = f", var_list={var_list}" if var_list else ""
  if c["transform"] is None and c["optimizer2"] is None:
    w.add(f"  train_steps.append(optimizer.minimize(loss{args}{step_args}))")
    return
  w.add(f"  pairs = optimizer.compute_gradients(loss{args})")
  if c["transform"] is not None:
    w.add("  grads, variables = zip(*pairs)")
    w.add("  " + _TRANSFORMS[c["transform"]])
    w.add("  pairs = list(zip(grads, variables))")
  if c["optimizer2"] is None:
    w.add(f"  train_steps.append(optimizer.apply_gradients(pairs{step_args}))")
    return
  w.add("  outer = [p for p in pairs if p[1].name.startswith('out/')]")
  w.add("  inner = [p for p in pairs if not p[1].name.startswith('out/')]")
  w.add("  train_steps.append(optimizer.apply_gradients(outer))")
  # The second waits for the first and counts the step: AdagradDA reads
  # the global step, which must not move while either applies.
  w.add("  with tf.control_dependencies(train_steps):")
  w.add("    train_steps.append(optimizer2.apply_gradients("
        f"inner{step_args}))")


def _optimizers(w, counters):
  """The train op: one optimizer, or two (the output layer's and the
  others'), the counters grouped with it as chosen."""
  c = w.c
  rates = {}
  for key in ("optimizer", "optimizer2"):
    name = c[key]
    if name is None:
      continue
    rate = RATES[name]
    if c["hyper"] == "learning_rate" and key == "optimizer":
      w.add(f"lr = tf.compat.v1.placeholder_with_default({rate}, [], "
            "name='lr')")
      w.feeds["lr"] = f"{rate / 2} if i in {c['hyper_runs']} else None"
      rate = "lr"
    rates[key] = rate
    w.add(f"{key} = " + OPTIMIZERS[name].format(lr=rate))
  step_args = ""
  if c["global_step"]:
    w.add("global_step = tf.compat.v1.train.get_or_create_global_step()")
    step_args = ", global_step=global_step"
  before = counters and c["grouping"] == "dependencies_before"
  w.add("updates = tf.compat.v1.get_collection("
        "tf.compat.v1.GraphKeys.UPDATE_OPS)")
  w.add("train_steps = []")
  if before:
    w.add(f"updates += [{', '.join(counters)}]")
  w.add("with tf.control_dependencies(updates):")
  var_list = ("tf.compat.v1.trainable_variables('out')"
              if c["var_list"] and c["optimizer2"] is None else None)
  _step(w, var_list, step_args)
  if not counters or before:
    w.add("train = tf.group(*train_steps)")
  elif c["grouping"] == "group":
    w.add(f"train = tf.group(*train_steps, {', '.join(counters)})")
  else:
    w.add("with tf.control_dependencies(train_steps):")
    w.add(f"  train = tf.group({', '.join(counters)})")
  w.fetches["train"] = "train"


def _saver(w):
  c = w.c
  if c["saver"] is None:
    w.add("saver, saved = None, None")
    return
  var_list = ("" if c["saver"] == "whole" else
              "var_list=tf.compat.v1.trainable_variables('out')")
  w.add(f"saver = tf.compat.v1.train.Saver({var_list})")
  saved = ("tf.compat.v1.global_variables()" if c["saver"] == "whole" else
           "tf.compat.v1.trainable_variables('out')")
  w.add(f"saved = sorted(v.name for v in {saved})")
  w.add("path = os.path.join(tempfile.mkdtemp(), 'model')")


def _runs(w):
  """feed, prepare and run: the runs' side of build()."""
  c = w.c
  w.add("fetches = {" + ", ".join(f"'{k}': {v}"
                                  for k, v in w.fetches.items()) + "}")
  plain = {"loss": "loss", "logits": "logits"}
  if c["metric"] is not None and c["metric_in_plain"]:
    plain["metric"] = "metric"
  w.add("plain_fetches = {" + ", ".join(f"'{k}': {v}"
                                        for k, v in plain.items()) + "}")
  w.add("")
  w.add("def feed(i, ctx):")
  w.add("  rng = np.random.RandomState(1000 + i)")
  w.add("  values = {" + ", ".join(f"{k}: {v}" for k, v in w.feeds.items())
        + "}")
  w.add("  return {k: v for k, v in values.items() if v is not None}")
  w.add("")
  w.add("def prepare(sess):")
  w.add("  ctx = {}")
  for line in w.prepare:
    w.add("  " + line)
  if c["callable"]:
    w.add(f"  ctx['keys'] = [{', '.join(w.call_keys)}]")
    w.add("  ctx['call'] = sess.make_callable(fetches, "
          "feed_list=ctx['keys'])")
  w.add("  return ctx")
  w.add("")
  w.add("def run(sess, kind, i, ctx):")
  w.add("  if kind == 'save':")
  w.add("    saver.save(sess, path)")
  w.add("    return {}")
  w.add("  if kind == 'restore':")
  w.add("    saver.restore(sess, path)")
  w.add("    return {}")
  w.add("  values = feed(i, ctx)")
  w.add("  if kind == 'plain':")
  w.add("    return sess.run(plain_fetches, values)")
  if c["callable"]:
    w.add("  if set(values) == set(ctx['keys']):")
    w.add("    return ctx['call'](*[values[k] for k in ctx['keys']])")
  w.add("  return sess.run(fetches, values)")
  w.add("")
  w.add("return dict(fetches=fetches, plain_fetches=plain_fetches, "
        "feed=feed,")
  w.add("            prepare=prepare, run=run, saved=saved)")


def source(choices, schedule):
  """The source of `build()` for `choices`, its runs following `schedule`
  (kinds of run, in order)."""
  w = _Writer(choices)
  _inputs(w)
  _model(w)
  _loss_and_metrics(w)
  counters = _counters(w)
  _optimizers(w, counters)
  _saver(w)
  _runs(w)
  plain = tuple(i for i, kind in enumerate(schedule) if kind == "plain")
  body = textwrap.indent("\n".join(w.lines), "  ")
  return (f"# choices: {choices!r}\n{HELPERS}\n\nSCHEDULE = {schedule!r}\n"
          f"PLAIN = {plain!r}  # runs that only evaluate\n\n\n"
          f"def build():\n{body}\n")
