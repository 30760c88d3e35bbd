"""NumPy references shared by the tests: DESIGN.md's SMA on least squares."""
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


def sma(params, batches, replicas, alpha, mu, lr, momentum=None,
        nesterov=False, adagrad=False, algorithm="sma"):
  """SMA (DESIGN.md) in float64 over `batches`, one (x, y) per wave.

  The optimizer is SGD, momentum SGD (`momentum` set) or Adagrad
  (`adagrad`, TF1's initial accumulator 0.1). With algorithm "none" the
  replicas train alone and the central model is replica 0's. A replica
  whose gradient is not finite is left out of its wave's central update
  and then set to the central model (nonfinite="skip").

  Returns:
    Per wave: (central params, the fetched loss (shard-weighted mean over
    the replicas that stepped), every replica's params, their optimizer
    accumulators).
  """
  z = [np.asarray(p, np.float64) for p in params]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(replicas)]
  accums = [[np.full_like(p, 0.1 if adagrad else 0.0) for p in z]
            for _ in range(replicas)]
  out = []
  for x, y in batches:
    shards = zip(np.array_split(np.asarray(x, np.float64), replicas),
                 np.array_split(np.asarray(y, np.float64), replicas))
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
    if algorithm == "sma":
      z, z_prev = [z[k] + corrections[k] + mu * (z[k] - z_prev[k])
                   for k in range(len(z))], z
    else:
      z = [p.copy() for p in models[0]]
    for j in skipped:
      models[j] = [p.copy() for p in z]
    loss = (sum(l * n for l, n in losses) / sum(n for _, n in losses)
            if losses else float("nan"))
    out.append(([p.copy() for p in z], loss, models, accums))
  return out
