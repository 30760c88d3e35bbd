"""The ways to keep replicas together, as `TensorBowSession(algorithm=)` takes
them: an instance of one of these classes, or its name.

    tb.TensorBowSession(replicas=4, algorithm=tb.algorithms.SMA(alpha=0.1))
    tb.TensorBowSession(replicas=4, algorithm="sma", alpha=0.1)  # the same

Each is also the seam (base.Algorithm) through which the execution graph's
copier, the replica state and the wave ask what a replica's optimizer
step becomes, what state the algorithm keeps and what it needs of a wave;
each has a file of its own.
"""


from tensorbow.algorithms.adaptive import Adaptive
from tensorbow.algorithms.asgd import ASGD
from tensorbow.algorithms.base import Algorithm
from tensorbow.algorithms.easgd import EASGD
from tensorbow.algorithms.independent import Independent
from tensorbow.algorithms.local_sgd import LocalSGD
from tensorbow.algorithms.lookahead import Lookahead
from tensorbow.algorithms.sma import SMA
from tensorbow.algorithms.ssgd import SSGD


_BY_NAME = {"sma": SMA, "easgd": EASGD, "asgd": ASGD, "ssgd": SSGD,
            "adaptive": Adaptive, "local_sgd": LocalSGD,
            "lookahead": Lookahead, "none": Independent}
NAMES = tuple(_BY_NAME)


def by_name(name, **params):
  """The Algorithm `name` (one of NAMES), built with `params`.

  Raises:
    ValueError: an unknown name or a parameter out of range.
    TypeError: a parameter the algorithm does not take.
  """
  if name not in _BY_NAME:
    raise ValueError(f"algorithm must be one of {NAMES} or an instance from "
                     f"tensorbow.algorithms, got {name!r}")
  return _BY_NAME[name](**params)


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
    by_name(algorithm)  # raises, naming the algorithms there are
  sma = SMA(alpha, central_momentum)  # checks them whatever the algorithm
  if algorithm == "easgd":
    if central_momentum != 0.9:
      raise ValueError("easgd has no central momentum: give alpha and "
                       "period to tensorbow.algorithms.EASGD")
    return EASGD(alpha)
  return sma if algorithm == "sma" else by_name(algorithm)
