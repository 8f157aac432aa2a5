"""``specchat bench`` and ``specchat verify``: whether speculation paid, and whether it is exact.

Headless like the engine (the Rich table lives in :mod:`specchat.bench.table`, used only
by the command). Small modules with one job each: prompt sets, configurations, the
runner and the peer runner, statistics, memory figures, report writers, the plot, and
the exactness check.
"""
