"""A training run retried until it trains.

A wave can end without training: a worker of the job was lost or joined
(scaleout.MembershipChanged; the wave put back what it wrote and took,
waves.Trainer), or, with replicas="auto", its batch could not be split
across the replicas of the setting tried (batch_sizes.UnsplittableBatch).
The session hands this loop what to run and what to do after each; the
loop knows nothing of the session.
"""
from tensorbow import scaleout
from tensorbow.rewrite import batch_sizes


def train(train_once, go_on_without, refused_split):
  """Runs `train_once()` until it returns.

  Args:
    train_once: runs one wave; returns what it trained (waves.Trained).
    go_on_without: called with a `scaleout.MembershipChanged` after a wave
      that lost or took in a worker; makes the setting anew.
    refused_split: called with a `batch_sizes.UnsplittableBatch` after a
      wave whose batch could not be split; raises it, or takes a setting
      that can (replicas="auto": L = 1).

  Returns:
    What `train_once` returned.
  """
  while True:
    try:
      return train_once()
    except scaleout.MembershipChanged as change:
      go_on_without(change)
    except batch_sizes.UnsplittableBatch as refused:
      refused_split(refused)
