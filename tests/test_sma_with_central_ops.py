"""The SMA ops fused with the central update (ResourceApplySma*WithCentral).

L replicas' ops are run for several waves, concurrently (one TensorFlow run of
all of them) and one after another in a shuffled order, and compared with a
NumPy implementation of DESIGN.md, "Synchronous model averaging". The large
shape spans several of the kernel's chunks, so replicas meet in the chunk locks
and the buffer rotation at the end of a wave is checked on a split variable. The
*OuterWithCentral forms take a dense layer's gradient as its factors x and dy;
they are checked the same way with the gradient xᵀ·dy. Whatever order the
replicas run in, the central model comes out the same to the bit.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow  # noqa: F401  (loads the op library)
from tensorbow import ops as tb_ops

tf1 = tf.compat.v1
L = 3
ALPHA, MU, LR, MOMENTUM = 0.3, 0.6, 0.1, 0.7
BATCH = 4  # of the factors of the *Outer forms' gradients


def _tol(dtype):
  return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(
      rtol=1e-12, atol=1e-12)


class Wave(object):
  """L replicas of one variable and their fused ops, in a graph of its own."""

  def __init__(self, optimizer, dtype, shape, use_locking=False, seed=0,
               outer=False, kind="resource", mu=MU, z_prev_offset=0.0):
    self.optimizer = optimizer
    self.mu = mu
    self.outer = outer
    self.kind = kind
    self.dtype = dtype
    rng = np.random.RandomState(seed)
    self.z0 = rng.uniform(-1, 1, shape).astype(dtype)
    # Replicas start away from z, so every correction is non-zero.
    self.w0 = [(self.z0 + rng.uniform(-0.5, 0.5, shape)).astype(dtype)
               for _ in range(L)]
    self.graph = tf.Graph()
    with self.graph.as_default():
      var = lambda name, value: tf1.get_variable(name, initializer=value,
                                                 use_resource=True)
      # The replicas' variables and the central model: as the kind asks
      # (its other two buffers are resource variables in both forms).
      own = var if kind == "resource" else (
          lambda name, value: tf1.Variable(value, name=name,
                                           use_resource=False))
      self.z = own("z", self.z0)
      self.zp0 = (self.z0 + z_prev_offset).astype(dtype)
      self.zp = var("z_prev", self.zp0)
      self.next = var("next", np.zeros(shape, dtype))
      self.w = [own(f"w{r}", w) for r, w in enumerate(self.w0)]
      self.a = [own(f"a{r}", np.zeros(shape, dtype)) for r in range(L)]
      self.g = [tf1.placeholder(dtype, None, name=f"g{r}") for r in range(L)]
      # The Outer forms' factors: the gradient is x[r]ᵀ·dy[r].
      self.x = [tf1.placeholder(dtype, None, name=f"x{r}") for r in range(L)]
      self.dy = [tf1.placeholder(dtype, None, name=f"dy{r}")
                 for r in range(L)]
      # ALPHA unless fed: EASGD between its exchanges feeds 0.
      self.alpha = tf1.placeholder_with_default(
          tf.constant(ALPHA, dtype), [], name="alpha")
      self.ops = [self._op(r, use_locking) for r in range(L)]
      self.all = tf.group(*self.ops)
      self.init = tf1.global_variables_initializer()
      self.read_z = tf.identity(self.z.value())

  def feed(self, r, rng):
    """A feed of replica r's gradient (or its factors), and the gradient."""
    if not self.outer:
      g = rng.uniform(-1, 1, self.z0.shape).astype(self.dtype)
      return {self.g[r]: g}, g
    x = rng.uniform(-1, 1, (BATCH, self.z0.shape[0])).astype(self.dtype)
    dy = rng.uniform(-1, 1, (BATCH, self.z0.shape[1])).astype(self.dtype)
    return {self.x[r]: x, self.dy[r]: dy}, x.astype(np.float64).T @ dy

  def _op(self, r, use_locking):
    c = lambda v: tf.constant(v, self.dtype)
    index = tf.constant(r, tf.int32)
    attrs = dict(replica=r, num_replicas=L, barrier="b",
                 use_locking=use_locking)
    if self.kind == "ref":
      lib, w = tb_ops.library(), self.w[r]._ref()  # pylint: disable=protected-access
      a = self.a[r]._ref()  # pylint: disable=protected-access
      central = (self.z._ref(), self.zp.handle, self.next.handle)  # pylint: disable=protected-access
      nesterov = dict(use_nesterov=self.optimizer == "nesterov")
      if self.outer and self.optimizer == "sgd":
        return lib.tensor_bow_apply_sma_gradient_descent_outer_with_central(
            w, *central, self.alpha, c(LR), self.x[r], self.dy[r], c(self.mu),
            index, **attrs).op
      if self.outer:
        return lib.tensor_bow_apply_sma_momentum_outer_with_central(
            w, a, *central, self.alpha, c(LR), self.x[r], self.dy[r],
            c(MOMENTUM), c(self.mu), index, **nesterov, **attrs).op
      if self.optimizer == "sgd":
        return lib.tensor_bow_apply_sma_gradient_descent_with_central(
            w, *central, self.alpha, c(LR), self.g[r], c(self.mu), index,
            **attrs).op
      return lib.tensor_bow_apply_sma_momentum_with_central(
          w, a, *central, self.alpha, c(LR), self.g[r], c(MOMENTUM), c(self.mu),
          index, **nesterov, **attrs).op
    central = (self.z.handle, self.zp.handle, self.next.handle)
    if self.outer:
      lib = tb_ops.library()
      if self.optimizer == "sgd":
        apply = (lib.
                 tensor_bow_resource_apply_sma_gradient_descent_outer_with_central)
        return apply(
            self.w[r].handle, *central, self.alpha, c(LR), self.x[r],
            self.dy[r], c(self.mu), index, **attrs)
      return lib.tensor_bow_resource_apply_sma_momentum_outer_with_central(
          self.w[r].handle, self.a[r].handle, *central, self.alpha, c(LR),
          self.x[r], self.dy[r], c(MOMENTUM), c(self.mu), index,
          use_nesterov=self.optimizer == "nesterov", **attrs)
    if self.optimizer == "sgd":
      return tb_ops.resource_apply_sma_gradient_descent_with_central(
          self.w[r].handle, *central, self.alpha, c(LR), self.g[r], c(self.mu),
          replica=r, num_replicas=L, barrier="b", use_locking=use_locking)
    return tb_ops.resource_apply_sma_momentum_with_central(
        self.w[r].handle, self.a[r].handle, *central, self.alpha, c(LR),
        self.g[r], c(MOMENTUM), c(self.mu), replica=r, num_replicas=L,
        barrier="b", use_locking=use_locking,
        use_nesterov=self.optimizer == "nesterov")


def reference_wave(optimizer, z, zp, ws, accums, grads, alpha=ALPHA, mu=MU):
  """One wave of DESIGN.md, "Synchronous model averaging" in NumPy; returns the
  new state."""
  corrections, new_ws, new_accums = [], [], []
  for w, a, g in zip(ws, accums, grads):
    c = alpha * (w - z)
    if optimizer == "sgd":
      step = LR * g
    else:
      a = MOMENTUM * a + g
      step = LR * g + LR * MOMENTUM * a if optimizer == "nesterov" else LR * a
    new_ws.append(w - step - c)
    new_accums.append(a)
    corrections.append(c)
  z_new = z + sum(corrections) + mu * (z - zp)
  return z_new, z, new_ws, new_accums


# Every *WithCentral form: locked or not, SGD or momentum, plain or with
# the gradient as factors; (200, 300) as a gradient's factors: 54 rows a
# chunk, the last one short.
LOCKING = pytest.mark.parametrize("use_locking", [False, True],
                                  ids=["unlocked", "locked"])
SHAPES = pytest.mark.parametrize("shape,outer", [
    ((3,), False), ((200, 300), False), ((3, 5), True), ((200, 300), True)
], ids=["3", "200x300", "3x5-outer", "200x300-outer"])
OPTIMIZERS = pytest.mark.parametrize("optimizer",
                                     ["sgd", "momentum", "nesterov"])


@pytest.mark.parametrize("concurrent", [True, False],
                         ids=["one-run", "one-by-one"])
@pytest.mark.parametrize("use_locking", [
    False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["unlocked", "locked"])  # locked: slow tier
@SHAPES
@OPTIMIZERS
@pytest.mark.parametrize("dtype", [
    np.float32, pytest.param(np.float64, marks=pytest.mark.slow)],
                         ids=["f32", "f64"])  # float64: slow tier
def test_waves_match_numpy(dtype, optimizer, shape, outer, use_locking,
                           concurrent):
  _check_waves(Wave(optimizer, dtype, shape, use_locking, outer=outer),
               concurrent)


@LOCKING
@SHAPES
@OPTIMIZERS
def test_reference_variable_waves_match_numpy(optimizer, shape, outer,
                                              use_locking):
  """The reference form: the replicas' variables (and accumulators) and the
  central model by reference, its other buffers resource variables."""
  _check_waves(Wave(optimizer, np.float32, shape, use_locking, outer=outer,
                    kind="ref"), concurrent=True)


def _check_waves(wave, concurrent):
  """Three waves of `wave` against reference_wave."""
  dtype, optimizer, shape = wave.dtype, wave.optimizer, wave.z0.shape
  rng = np.random.RandomState(1)
  z, zp = wave.z0.astype(np.float64), wave.z0.astype(np.float64)
  ws = [w.astype(np.float64) for w in wave.w0]
  accums = [np.zeros(shape) for _ in range(L)]
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    for _ in range(3):
      feeds, grads = zip(*[wave.feed(r, rng) for r in range(L)])
      if concurrent:
        sess.run(wave.all, {k: v for f in feeds for k, v in f.items()})
      else:
        for r in rng.permutation(L):
          sess.run(wave.ops[r], feeds[r])
      z, zp, ws, accums = reference_wave(optimizer, z, zp, ws, accums, grads)
      got_z, got_zp = sess.run([wave.z, wave.zp])
      np.testing.assert_allclose(got_z, z, **_tol(dtype))
      np.testing.assert_allclose(got_zp, zp, **_tol(dtype))
      for r in range(L):
        np.testing.assert_allclose(sess.run(wave.w[r]), ws[r], **_tol(dtype))
        if optimizer != "sgd":
          np.testing.assert_allclose(sess.run(wave.a[r]), accums[r],
                                     **_tol(dtype))


@pytest.mark.parametrize("concurrent", [True, False],
                         ids=["one-run", "one-by-one"])
@pytest.mark.parametrize("kind", ["ref", "resource"])
@SHAPES
@OPTIMIZERS
def test_waves_without_a_pull_step_alone_and_leave_the_central_model(
    optimizer, shape, outer, kind, concurrent):
  """EASGD between its exchanges: alpha 0 and no central momentum. Such a
  wave is the optimizer's step alone and leaves the central model and
  z_prev as they are, to the bit (`next` holds nothing between waves); the
  exchanges around it sum as ever, z_prev never read (it holds NaN here)."""
  wave = Wave(optimizer, np.float32, shape, outer=outer, kind=kind, mu=0.0,
              z_prev_offset=np.nan)
  rng = np.random.RandomState(2)
  z = wave.z0.astype(np.float64)
  ws = [w.astype(np.float64) for w in wave.w0]
  accums = [np.zeros(shape) for _ in range(L)]
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    for alpha in [0.0, ALPHA, 0.0, 0.0, ALPHA]:
      before = sess.run([wave.z, wave.zp])
      feeds, grads = zip(*[wave.feed(r, rng) for r in range(L)])
      if concurrent:
        fed = {k: v for f in feeds for k, v in f.items()}
        sess.run(wave.all, {**fed, wave.alpha: alpha})
      else:
        for r in rng.permutation(L):
          sess.run(wave.ops[r], {**feeds[r], wave.alpha: alpha})
      z, _, ws, accums = reference_wave(optimizer, z, z, ws, accums, grads,
                                        alpha=alpha, mu=0.0)
      after = sess.run([wave.z, wave.zp])
      if alpha == 0.0:
        for was, now in zip(before, after):
          np.testing.assert_array_equal(now, was)
      np.testing.assert_allclose(after[0], z, **_tol(np.float32))
      for r in range(L):
        np.testing.assert_allclose(sess.run(wave.w[r]), ws[r],
                                   **_tol(np.float32))
        if optimizer != "sgd":
          np.testing.assert_allclose(sess.run(wave.a[r]), accums[r],
                                     **_tol(np.float32))


def test_central_model_moves_only_when_every_replica_has_passed():
  wave = Wave("sgd", np.float32, (200, 300))
  grads = [np.ones((200, 300), np.float32)] * L
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    for r in range(L - 1):
      sess.run(wave.ops[r], {wave.g[r]: grads[r]})
      np.testing.assert_array_equal(sess.run(wave.z), wave.z0)
    sess.run(wave.ops[L - 1], {wave.g[L - 1]: grads[L - 1]})
    np.testing.assert_array_equal(sess.run(wave.zp), wave.z0)
    assert not np.allclose(sess.run(wave.z), wave.z0)


@pytest.mark.parametrize("kind", ["ref", "resource"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64],
                         ids=["f32", "f64"])
def test_central_model_is_the_same_whatever_order_replicas_run_in(kind,
                                                                   dtype):
  """Two sessions run the same waves, the replicas in different orders:
  every buffer comes out equal to the bit (the corrections are summed in
  replica order, not in the order they arrive)."""
  rng = np.random.RandomState(4)
  shape = (200, 300)
  grads = [[rng.uniform(-1, 1, shape).astype(dtype) for _ in range(L)]
           for _ in range(3)]
  orders = [[list(rng.permutation(L)) for _ in grads] for _ in range(2)]
  # Orders chosen to differ: each wave's last (and first) replica changes.
  orders[1] = [order[::-1] for order in orders[0]]
  results = []
  for order in orders:
    wave = Wave("momentum", dtype, shape, kind=kind)
    with tf1.Session(graph=wave.graph) as sess:
      sess.run(wave.init)
      for wave_grads, wave_order in zip(grads, order):
        for r in wave_order:
          sess.run(wave.ops[r], {wave.g[r]: wave_grads[r]})
      results.append(sess.run([wave.z, wave.zp] + wave.w + wave.a))
  for got, want in zip(results[1], results[0]):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("left_out", [0, 1, 2])
def test_a_wave_without_one_replica_sums_the_others_in_order(left_out):
  """TensorBowSetSmaParticipants leaves replica `left_out` out of a wave:
  the others' corrections make the central update, run in either order."""
  shape = (200, 300)
  rng = np.random.RandomState(5)
  grads = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(L)]
  taking = [r for r in range(L) if r != left_out]
  results = []
  for order in (taking, taking[::-1]):
    wave = Wave("sgd", np.float32, shape)
    with wave.graph.as_default():
      two = tb_ops.library().tensor_bow_set_sma_participants(
          tf.constant(L - 1), barriers=["b"])
    with tf1.Session(graph=wave.graph) as sess:
      sess.run(wave.init)
      sess.run(two)
      for r in order:
        sess.run(wave.ops[r], {wave.g[r]: grads[r]})
      results.append(sess.run([wave.z, wave.zp]))
  z0 = wave.z0.astype(np.float64)
  want = z0 + sum(ALPHA * (wave.w0[r] - z0) for r in taking)
  np.testing.assert_allclose(results[0][0], want, **_tol(np.float32))
  np.testing.assert_array_equal(results[0][1], wave.z0)
  for got, first in zip(results[1], results[0]):
    np.testing.assert_array_equal(got, first)


def test_a_replica_passing_twice_in_a_wave_is_an_error_and_changes_nothing():
  wave = Wave("momentum", np.float32, (3,))
  ones = np.ones(3, np.float32)
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    sess.run(wave.ops[0], {wave.g[0]: ones})
    before = sess.run([wave.w[0], wave.a[0], wave.z])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replica slot 0 already passed"):
      sess.run(wave.ops[0], {wave.g[0]: ones})
    for got, want in zip(sess.run([wave.w[0], wave.a[0], wave.z]), before):
      np.testing.assert_array_equal(got, want)
    for r in range(1, L):
      sess.run(wave.ops[r], {wave.g[r]: ones})
    np.testing.assert_array_equal(sess.run(wave.zp), wave.z0)


@pytest.mark.parametrize("kind", ["ref", "resource"])
def test_fetched_central_value_is_never_overwritten(kind):
  # A fetched value may share the variable's buffer; the rotation makes
  # that buffer z_prev, then `next`, which the kernel must not write into.
  wave = Wave("momentum", np.float32, (200, 300), kind=kind)
  rng = np.random.RandomState(2)
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    fetched = sess.run(wave.read_z)
    snapshot = fetched.copy()
    for _ in range(4):
      sess.run(wave.all, {g: rng.uniform(-1, 1, (200, 300)).astype(
          np.float32) for g in wave.g})
    np.testing.assert_array_equal(fetched, snapshot)


def test_wrong_gradient_shape_is_an_error():
  wave = Wave("momentum", np.float32, (3,))
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'grad' must have the shape of var \[3\], "
                       r"got \[4\]"):
      sess.run(wave.ops[0], {wave.g[0]: np.ones(4, np.float32)})


@pytest.mark.parametrize("x_shape,dy_shape,message", [
    ((4, 3), (5, 5), r"'a' and 'b' must be matrices with as many rows, got "
     r"\[4,3\] and \[5,5\]"),
    ((4, 5), (4, 3), r"var must have the shape of aᵀ·b \[5, 3\], got \[3,5\]"),
], ids=["batches", "var"])
def test_wrong_factor_shapes_are_an_error_and_change_nothing(
    x_shape, dy_shape, message):
  wave = Wave("momentum", np.float32, (3, 5), outer=True)
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      sess.run(wave.ops[0], {wave.x[0]: np.ones(x_shape, np.float32),
                             wave.dy[0]: np.ones(dy_shape, np.float32)})
    np.testing.assert_array_equal(sess.run(wave.w[0]), wave.w0[0])
    np.testing.assert_array_equal(sess.run(wave.a[0]), np.zeros((3, 5)))
    np.testing.assert_array_equal(sess.run(wave.z), wave.z0)
    # The wave goes on: the failed pass was not counted.
    rng = np.random.RandomState(3)
    for r in range(L):
      sess.run(wave.ops[r], wave.feed(r, rng)[0])
    np.testing.assert_array_equal(sess.run(wave.zp), wave.z0)


def test_non_scalar_central_momentum_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with wave.graph.as_default():
    m = tf1.placeholder(tf.float32, None)
    op = tb_ops.resource_apply_sma_gradient_descent_with_central(
        wave.w[0].handle, wave.z.handle, wave.zp.handle, wave.next.handle,
        0.5, 0.1, wave.g[0], m, replica=0, num_replicas=L, barrier="x")
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'central_momentum' must be a scalar, got "
                       r"shape \[2\]"):
      sess.run(op, {m: [0.1, 0.2], wave.g[0]: np.ones(3, np.float32)})


@pytest.mark.parametrize("index", [-1, 3])
def test_replica_index_out_of_range_is_an_error(index):
  wave = Wave("sgd", np.float32, (3,))
  with wave.graph.as_default():
    op = tb_ops.library(
    ).tensor_bow_resource_apply_sma_gradient_descent_with_central(
        wave.w[0].handle, wave.z.handle, wave.zp.handle, wave.next.handle,
        0.5, 0.1, wave.g[0], 0.9, index, replica=0, num_replicas=2,
        first_replica=1, barrier="x")
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"replica_index {index} is not in \[1, 3\)"):
      sess.run(op, {wave.g[0]: np.ones(3, np.float32)})


def test_replica_out_of_range_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with wave.graph.as_default():
    op = tb_ops.resource_apply_sma_gradient_descent_with_central(
        wave.w[0].handle, wave.z.handle, wave.zp.handle, wave.next.handle,
        0.5, 0.1, wave.g[0], 0.9, replica=3, num_replicas=3, barrier="x")
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"replica 3 is not in \[0, 3\)"):
      sess.run(op, {wave.g[0]: np.ones(3, np.float32)})


def test_uninitialised_next_buffer_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with tf1.Session(graph=wave.graph) as sess:
    sess.run([v.initializer for v in [wave.z, wave.zp] + wave.w])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="uninitialized variable 'next'"):
      sess.run(wave.ops[0], {wave.g[0]: np.ones(3, np.float32)})


@pytest.mark.parametrize("kind", ["ref", "resource"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("devices", [1, 3])
def test_sum_device_copies_is_the_central_update_of_all_devices(
    kind, dtype, devices):
  """TensorBow{,Resource}SumDeviceCopies against NumPy, twice in a row,
  the second from what the first wrote: the central model, its previous
  value and every copy."""
  rng = np.random.RandomState(devices)
  shape = (70000,)  # several of parallelFor's blocks
  z0 = rng.uniform(-1, 1, shape).astype(dtype)
  zp0 = rng.uniform(-1, 1, shape).astype(dtype)
  graph = tf.Graph()
  with graph.as_default():
    if kind == "ref":
      z = tf1.Variable(z0, use_resource=False, name="z")
      central = z._ref()  # pylint: disable=protected-access
    else:
      z = tf1.get_variable("z", initializer=z0, use_resource=True)
      central = z.handle
    zp = tf1.get_variable("zp", initializer=zp0, use_resource=True)
    copies = [tf1.get_variable(f"c{d}", initializer=z0, use_resource=True)
              for d in range(devices)]
    moves = [tf1.placeholder(dtype, shape) for _ in range(devices)]
    # A wave: every copy moved from the same z; the first copy's value also
    # assigned to a variable the op does not take, which may then share
    # its buffer: the sum must not write through it.
    moved = [z.read_value() + m for m in moves]
    other = tf1.get_variable("other", initializer=z0, use_resource=True)
    wave = tf.group(*[c.assign(v) for c, v in zip(copies, moved)],
                    other.assign(moved[0]))
    library = tb_ops.library()
    op = (library.tensor_bow_sum_device_copies if kind == "ref" else
          library.tensor_bow_resource_sum_device_copies)
    total = op(central, zp.handle, [c.handle for c in copies],
               tf.constant(MU, dtype))
    reads = [z.read_value(), zp.read_value()] + [c.read_value()
                                                 for c in copies]
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float16 else _tol(dtype)
      for _ in range(2):
        given = [rng.uniform(-0.1, 0.1, shape).astype(dtype)
                 for _ in range(devices)]
        sess.run(wave, dict(zip(moves, given)))
        before = [v.astype(np.float64) for v in sess.run(reads)]
        sess.run(total)
        np.testing.assert_array_equal(sess.run(other), before[2])
        want_z = before[0]
        base = want_z + MU * (want_z - before[1])
        want = base + np.sum([c - base for c in before[2:]], axis=0)
        got = sess.run(reads)
        np.testing.assert_allclose(got[0], want, **tol)
        np.testing.assert_array_equal(got[1], before[0].astype(dtype))
        for c in got[2:]:
          np.testing.assert_array_equal(c, got[0])
