"""Lookahead (Zhang et al., 2019) as local SGD's outer step.

The user's optimizer takes the fast steps; every `k` training runs the
slow weights (the central model, what plain runs read) move `alpha` of
the way toward the fast ones, and the fast weights restart from them.
That is local SGD with period k, outer rate alpha and no outer momentum
(local_sgd.py, DESIGN.md "Local SGD"), taken at any L: with one replica
it is Lookahead itself, with several the fast weights are their mean.
"""
from tensorbow.algorithms import local_sgd


class Lookahead(local_sgd.LocalSGD):
  """Lookahead: every `k` training runs the slow weights move `alpha` of
  the way to the fast ones.

  Args:
    k: training runs between slow steps, an int >= 1 (the paper's 5).
    alpha: the slow step's fraction, in (0, 1) (the paper's 0.5; 1 would
      be no slow weights at all).

  Raises:
    ValueError: for an argument out of range.
  """

  name = "lookahead"

  def __init__(self, k=5, alpha=0.5):
    if not 0 < alpha < 1:
      raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    super().__init__(period=k, outer_learning_rate=alpha)
