"""Graph rewriting: the user's graph to an execution graph and a plan.

`analysis` reads what a run executes and writes; `replicate` adds the
replicas, the SMA ops and the synchronisation to the user's graph.
"""
