"""NumPy references shared by the tests: DESIGN.md's SMA and local SGD on
least squares."""
import numpy as np


def least_squares(params, xs, ys):
  """Gradients of 0.5 * mean((xs @ w [+ b] - ys) ** 2) for params [w] or
  [w, b], and that loss."""
  r = xs @ params[0] - ys
  if len(params) > 1:
    r = r + params[1]
  grads = [xs.T @ r / len(xs)]
  if len(params) > 1:
    grads.append(r.mean(axis=0))
  return grads, 0.5 * float(np.mean(r ** 2))


def sgd_step(param, accum, grad, lr, momentum=None):
  """(param, accum) after one step of SGD, or of momentum SGD (TF1's
  MomentumOptimizer) with `momentum` set."""
  if momentum is None:
    return param - lr * grad, accum
  accum = momentum * accum + grad
  return param - lr * accum, accum


def sma(params, batches, replicas, alpha, mu, lr, momentum=None,
        nesterov=False, adagrad=False, algorithm="sma"):
  """SMA (DESIGN.md) in float64 over `batches`, one (x, y) per wave.

  `alpha` is one factor or one per wave (EASGD's: 0 between its
  communication waves). The optimizer is SGD, momentum SGD (`momentum`
  set) or Adagrad (`adagrad`, TF1's initial accumulator 0.1). With
  algorithm "none" the replicas train alone and the central model is
  replica 0's. A replica whose gradient is not finite is left out of its
  wave's central update and then set to the central model
  (nonfinite="skip"). A batch with fewer rows than replicas trains
  replicas 0, 1, ... one row each; the others sit the wave out, unchanged
  and out of its central update (DESIGN.md, feed sharding). `lr` is one
  rate or one per wave.

  Returns:
    Per wave: (central params, the fetched loss (shard-weighted mean over
    the replicas that stepped), every replica's params, their optimizer
    accumulators).
  """
  alphas = (list(alpha) if isinstance(alpha, (list, tuple))
            else [alpha] * len(batches))
  lrs = list(lr) if isinstance(lr, (list, tuple)) else [lr] * len(batches)
  z = [np.asarray(p, np.float64) for p in params]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(replicas)]
  accums = [[np.full_like(p, 0.1 if adagrad else 0.0) for p in z]
            for _ in range(replicas)]
  out = []
  for (x, y), alpha, lr in zip(batches, alphas, lrs):
    trained = min(replicas, max(1, len(x)))
    shards = zip(np.array_split(np.asarray(x, np.float64), trained),
                 np.array_split(np.asarray(y, np.float64), trained))
    corrections = [np.zeros_like(p) for p in z]
    losses, skipped = [], []
    for j, (xs, ys) in enumerate(shards):
      grads, loss = least_squares(models[j], xs, ys)
      if not all(np.isfinite(g).all() for g in grads):
        skipped.append(j)
        continue
      losses.append((loss, len(xs)))
      for k, g in enumerate(grads):
        c = alpha * (models[j][k] - z[k]) if algorithm == "sma" else 0.0
        if adagrad:
          accums[j][k] = accums[j][k] + g * g
          step = lr * g / np.sqrt(accums[j][k])
        elif momentum is None:
          step = lr * g
        else:
          accums[j][k] = momentum * accums[j][k] + g
          step = (lr * g + lr * momentum * accums[j][k] if nesterov
                  else lr * accums[j][k])
        models[j][k] = models[j][k] - step - c
        corrections[k] = corrections[k] + c
    z, z_prev = central_update(z, z_prev, corrections, mu, models, algorithm)
    for j in skipped:
      models[j] = [p.copy() for p in z]
    loss = (sum(l * n for l, n in losses) / sum(n for _, n in losses)
            if losses else float("nan"))
    out.append(([p.copy() for p in z], loss, models, accums))
  return out


def local_sgd_levels(params, batches, workers, replicas, lr, momentum,
                     period, worker_period, outer_lr, outer_momentum,
                     nesterov, warmup):
  """Local SGD with a period per level (DESIGN.md) in float64: `workers`
  workers of `replicas` replicas, the batch cut into one shard per
  replica in order. Each warm-up wave averages every replica; after it,
  each worker takes its own outer step on its replicas every `period`
  waves, and every `worker_period` waves the workers then average their
  central models and velocities.

  Returns:
    Per worker, its central params after the last wave.
  """
  z = [[np.asarray(p, np.float64) for p in params] for _ in range(workers)]
  velocity = [[np.zeros_like(p) for p in z[0]] for _ in range(workers)]
  models = [[[p.copy() for p in z[0]] for _ in range(replicas)]
            for _ in range(workers)]
  accums = [[[np.zeros_like(p) for p in z[0]] for _ in range(replicas)]
            for _ in range(workers)]
  for wave, (x, y) in enumerate(batches, 1):
    shards = list(zip(
        np.array_split(np.asarray(x, np.float64), workers * replicas),
        np.array_split(np.asarray(y, np.float64), workers * replicas)))
    for k in range(workers):
      for j in range(replicas):
        grads, _ = least_squares(models[k][j], *shards[k * replicas + j])
        for i, g in enumerate(grads):
          models[k][j][i], accums[k][j][i] = sgd_step(
              models[k][j][i], accums[k][j][i], g, lr, momentum)
    if wave <= warmup:  # every replica averaged, no outer step
      mean = [np.mean([m[i] for ms in models for m in ms], axis=0)
              for i in range(len(params))]
      z = [[p.copy() for p in mean] for _ in range(workers)]
    elif (wave - warmup) % period == 0:
      for k in range(workers):
        for i in range(len(params)):
          delta = z[k][i] - np.mean([m[i] for m in models[k]], axis=0)
          v = outer_momentum * velocity[k][i] + delta
          z[k][i] = z[k][i] - outer_lr * (
              delta + outer_momentum * v if nesterov else v)
          velocity[k][i] = v
      if (wave - warmup) % worker_period == 0:
        z_mean = [np.mean([zk[i] for zk in z], axis=0)
                  for i in range(len(params))]
        v_mean = [np.mean([vk[i] for vk in velocity], axis=0)
                  for i in range(len(params))]
        z = [[p.copy() for p in z_mean] for _ in range(workers)]
        velocity = [[p.copy() for p in v_mean] for _ in range(workers)]
    else:
      continue
    models = [[[p.copy() for p in z[k]] for _ in range(replicas)]
              for k in range(workers)]
  return z


def sma_members(params, batches, members, mu, lr):
  """SMA (SGD replicas, float64) over `batches` where wave i trains the
  replicas `members[i]` (numbers among all the replicas there ever were),
  the batch cut among them in their order, with alpha 1 / their number:
  a cluster that lost or gained workers. A replica keeps its own model
  from one wave it trains to the next; one first trained starts from the
  central model.

  Returns:
    The central params after the last wave.
  """
  z = [np.asarray(p, np.float64) for p in params]
  z_prev = [p.copy() for p in z]
  models = {}
  for (x, y), ids in zip(batches, members):
    alpha = 1.0 / len(ids)
    corrections = [np.zeros_like(p) for p in z]
    for r, xs, ys in zip(ids, np.array_split(np.asarray(x, np.float64),
                                             len(ids)),
                         np.array_split(np.asarray(y, np.float64), len(ids))):
      model = models.setdefault(r, [p.copy() for p in z])
      grads, _ = least_squares(model, xs, ys)
      for k, g in enumerate(grads):
        c = alpha * (model[k] - z[k])
        model[k] = model[k] - lr * g - c
        corrections[k] = corrections[k] + c
    z, z_prev = central_update(z, z_prev, corrections, mu, None, "sma")
  return z


def central_update(z, z_prev, corrections, mu, models, algorithm):
  """(new central model, previous one) after a wave: SMA's update from the
  replicas' corrections, or with "none" replica 0's model."""
  if algorithm == "sma":
    return [z[k] + corrections[k] + mu * (z[k] - z_prev[k])
            for k in range(len(z))], z
  return [p.copy() for p in models[0]], z_prev


def embedding_regression(params, ids, ys):
  """Gradients of 0.5 * mean((sum(E[ids] * v, 1) - ys) ** 2) for params
  [E, v] (E's as a dense array, zero off the rows in `ids`), the rows in
  `ids`, and that loss."""
  table, v = params
  r = table[ids] @ v - ys
  grad_table = np.zeros_like(table)
  np.add.at(grad_table, ids, np.outer(r, v) / len(ids))
  return [grad_table, table[ids].T @ r / len(ids)], np.unique(ids), \
      0.5 * float(np.mean(r ** 2))


def sma_embedding(params, batches, replicas, alpha, mu, optimizer, lr,
                  algorithm="sma", momentum=0.9, beta1=0.9, beta2=0.999,
                  epsilon=1e-8):
  """SMA (DESIGN.md) in float64 of the embedding regression above, one
  (ids, y) per wave, each replica stepping with TF1's sparse update of the
  table and dense update of v.

  `optimizer`: "gd", "momentum" (the accumulator changes on the looked-up
  rows only, as SparseApplyMomentum's) or "adam" (TF1's sparse Adam: both
  moments decay on every row, the gradient adds to the looked-up rows).

  Returns:
    Per wave: (central params, the fetched loss).
  """
  z = [np.asarray(p, np.float64) for p in params]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(replicas)]
  slots = [[[np.zeros_like(p) for p in z] for _ in range(2)]
           for _ in range(replicas)]
  out = []
  for t, (ids, y) in enumerate(batches, start=1):
    shards = zip(np.array_split(np.asarray(ids), replicas),
                 np.array_split(np.asarray(y, np.float64), replicas))
    corrections = [np.zeros_like(p) for p in z]
    losses = []
    for j, (shard_ids, ys) in enumerate(shards):
      grads, rows, loss = embedding_regression(models[j], shard_ids, ys)
      losses.append((loss, len(ys)))
      for k, g in enumerate(grads):
        sparse = k == 0
        c = alpha * (models[j][k] - z[k]) if algorithm == "sma" else 0.0
        first, second = slots[j][0][k], slots[j][1][k]
        if optimizer == "gd":
          step = lr * g
        elif optimizer == "momentum":
          touched = rows if sparse else slice(None)
          first[touched] = momentum * first[touched] + g[touched]
          step = np.zeros_like(g)
          step[touched] = lr * first[touched]
        else:
          first *= beta1
          second *= beta2
          touched = rows if sparse else slice(None)
          first[touched] += (1 - beta1) * g[touched]
          second[touched] += (1 - beta2) * g[touched] ** 2
          lr_t = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
          step = lr_t * first / (np.sqrt(second) + epsilon)
        models[j][k] = models[j][k] - step - c
        corrections[k] = corrections[k] + c
    z, z_prev = central_update(z, z_prev, corrections, mu, models, algorithm)
    loss = sum(l * n for l, n in losses) / sum(n for _, n in losses)
    out.append(([p.copy() for p in z], loss))
  return out


def sma_step(var, accum, central, grad, alpha, lr, momentum=None,
             nesterov=False):
  """One replica's SMA step on one variable, in the dtype of its inputs and
  the kernels' order of operations (cc/kernels/sma_step.h):

    c = alpha * (var - central)
    var - grad * lr - c                                   (momentum None)
    accum = accum * momentum + grad;  var - accum * lr - c
    var - (grad * lr + accum * momentum * lr) - c         (nesterov)

  Returns:
    (var, accum, c), unrounded; accum is None without momentum.
  """
  c = alpha * (var - central)
  if momentum is None:
    return var - grad * lr - c, None, c
  accum = accum * momentum + grad
  if nesterov:
    return var - (grad * lr + accum * momentum * lr) - c, accum, c
  return var - accum * lr - c, accum, c


def sma_central(central, central_prev, corrections, mu):
  """The central model after SMA's update, in the dtype of its inputs and
  the kernels' order: central + (c_0 + c_1 + ...) + mu * (central -
  central_prev)."""
  total = corrections[0]
  for c in corrections[1:]:
    total = total + c
  return central + total + mu * (central - central_prev)


def local_sgd(params, batches, replicas, lr, momentum, period, outer_lr,
              outer_momentum, nesterov, warmup):
  """DESIGN.md's local SGD in float64 on least squares, `replicas`
  replicas each taking its np.array_split shard of each (x, y) batch.

  Returns:
    Per wave: (central params, the loss fetched (shard-weighted mean)).
  """
  z = [np.asarray(p, np.float64) for p in params]
  velocity = [np.zeros_like(p) for p in z]
  models = [[p.copy() for p in z] for _ in range(replicas)]
  accums = [[np.zeros_like(p) for p in z] for _ in range(replicas)]
  out = []
  for wave, (x, y) in enumerate(batches, 1):
    shards = zip(np.array_split(np.asarray(x, np.float64), replicas),
                 np.array_split(np.asarray(y, np.float64), replicas))
    losses = []
    for j, (xs, ys) in enumerate(shards):
      grads, loss = least_squares(models[j], xs, ys)
      losses.append((loss, len(xs)))
      for k, g in enumerate(grads):
        models[j][k], accums[j][k] = sgd_step(
            models[j][k], accums[j][k], g, lr, momentum)
    if wave <= warmup:
      rate, mu, keep = 1.0, 0.0, 0.0
    elif (wave - warmup) % period == 0:
      rate, mu, keep = outer_lr, outer_momentum, 1.0
    else:
      rate = None
    if rate is not None:
      for k in range(len(z)):
        delta = z[k] - np.mean([m[k] for m in models], axis=0)
        v = mu * velocity[k] + delta
        step = delta + mu * v if nesterov else v
        z[k] = z[k] - rate * step
        velocity[k] = keep * v
      models = [[p.copy() for p in z] for _ in range(replicas)]
    out.append(([p.copy() for p in z],
                sum(l * n for l, n in losses) / sum(n for _, n in losses)))
  return out
