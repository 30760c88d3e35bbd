"""The ways to keep replicas together, as `TensorBowSession(algorithm=)` takes
them: an instance of one of these classes, or its name.

    tb.TensorBowSession(replicas=4, algorithm=tb.algorithms.SMA(alpha=0.1))
    tb.TensorBowSession(replicas=4, algorithm="sma", alpha=0.1)  # the same
"""


class Algorithm(object):
  """What keeps a session's replicas together; `name` is its string form."""

  name = None

  def __eq__(self, other):
    return type(self) is type(other) and vars(self) == vars(other)

  def __hash__(self):
    return hash((type(self), tuple(sorted(vars(self).items()))))

  def __repr__(self):
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
    return f"{type(self).__name__}({args})"


class SMA(Algorithm):
  """Synchronous model averaging (DESIGN.md).

  Args:
    alpha: the correction factor, in (0, 1]; None means 1 / replicas.
    central_momentum: the momentum of the central model, in [0, 1).

  Raises:
    ValueError: for an argument out of range.
  """

  name = "sma"

  def __init__(self, alpha=None, central_momentum=0.9):
    if alpha is not None and not 0.0 < float(alpha) <= 1.0:
      raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    if not 0.0 <= float(central_momentum) < 1.0:
      raise ValueError(
          f"central_momentum must be in [0, 1), got {central_momentum!r}")
    self.alpha = None if alpha is None else float(alpha)
    self.central_momentum = float(central_momentum)


class Independent(Algorithm):
  """No synchronisation: the replicas train alone and the central model is
  replica 0's, to measure what synchronisation costs."""

  name = "none"


_BY_NAME = {"sma": SMA, "none": Independent}
NAMES = tuple(_BY_NAME)


def resolve(algorithm, alpha=None, central_momentum=0.9):
  """The Algorithm a session's arguments name.

  Args:
    algorithm: an Algorithm, or one of NAMES.
    alpha, central_momentum: the session's own SMA arguments; with an
      Algorithm instance they must be left at their defaults.

  Raises:
    ValueError: an unknown name, an argument out of range, or SMA's
      arguments given both to the session and to the instance.
  """
  if isinstance(algorithm, Algorithm):
    if alpha is not None or central_momentum != 0.9:
      raise ValueError(
          "give alpha and central_momentum to the algorithm or to the "
          f"session, not both (algorithm={algorithm!r})")
    return algorithm
  if algorithm not in _BY_NAME:
    raise ValueError(f"algorithm must be one of {NAMES} or an instance from "
                     f"tensorbow.algorithms, got {algorithm!r}")
  sma = SMA(alpha, central_momentum)  # checks them whatever the algorithm
  return sma if algorithm == "sma" else _BY_NAME[algorithm]()
