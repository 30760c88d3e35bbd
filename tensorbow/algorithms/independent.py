"""Independent replicas: no synchronisation."""
from tensorbow.algorithms import base


class Independent(base.Algorithm):
  """No synchronisation: the replicas train alone and the central model is
  replica 0's, to measure what synchronisation costs."""

  name = "none"
  model_from_replica = True
