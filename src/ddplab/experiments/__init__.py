"""Experiments: each module pairs rank functions (run on every rank) with a driver that calls
them through :func:`ddplab.run` and returns plain results for plots, tests and the CLI."""
