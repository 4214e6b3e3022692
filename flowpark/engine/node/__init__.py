"""A node's work that feeds runs: starts, sweeps and claims, wakes, signals, cancels and
operator actions; :class:`~flowpark.engine.node.engine.Engine` composes it."""
