"""The scaling model (DESIGN.md, "Two levels"): what the times of a
session's waves predict for more devices or workers.

A wave takes T_C to compute (its learning tasks and the rest of the wave
on this worker) and T_O to synchronise (the sums over the workers, and
over the devices of one process). The
lemma of the HTC guidelines (Lemma 3.1) takes the synchronisation to grow
with the number G of devices or workers, T(G) = T_C + G * t_O, t_O the
cost per member, and gives the scaling efficiency

    alpha(G) = T(1) / T(G) = (1 + r) / (1 + G * r),    r = t_O / T_C.

Measured on W members (workers, each with D devices: W·D), t_O = T_O / W.
GaDei's rule gives the bandwidth a
model of B bytes needs to keep up: B_w >= 2 * B / (T_C + T_O) (its
gradients out and its model in, once a wave).
"""
import collections

PREDICTED = (1, 2, 4, 8, 64)

Report = collections.namedtuple("Report", [
    "workers",  # W, the members (workers x devices) measured on
    "waves",  # the waves measured
    "compute_seconds",  # T_C, mean per wave
    "sync_seconds",  # T_O, mean per wave
    "ratio",  # R_O = T_O / T_C
    "per_member_ratio",  # r = R_O / W
    "model_bytes",  # B, the central model's bytes
    "bandwidth",  # GaDei's B_w, bytes per second
    "efficiency",  # {G: alpha(G)} for G in PREDICTED
])


def efficiency(r, g):
  """Lemma 3.1's alpha(G) for per-member ratio `r` = t_O / T_C."""
  return (1.0 + r) / (1.0 + g * r)


def bandwidth(model_bytes, wave_seconds):
  """GaDei's bandwidth (bytes/s) a model of `model_bytes` needs when a wave
  takes `wave_seconds`."""
  return 2.0 * model_bytes / wave_seconds if wave_seconds > 0 else 0.0


def report(workers, waves, compute_seconds, sync_seconds, model_bytes,
           predicted=PREDICTED):
  """The `Report` of `waves` waves that took `compute_seconds` and
  `sync_seconds` in all on one of `workers` workers."""
  if waves == 0:
    return Report(workers, 0, 0.0, 0.0, 0.0, 0.0, model_bytes, 0.0,
                  {g: 1.0 for g in predicted})
  t_c, t_o = compute_seconds / waves, sync_seconds / waves
  ratio = t_o / t_c if t_c > 0 else 0.0
  r = ratio / workers
  return Report(workers, waves, t_c, t_o, ratio, r, model_bytes,
                bandwidth(model_bytes, t_c + t_o),
                {g: efficiency(r, g) for g in predicted})
