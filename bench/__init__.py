"""corral's benchmark against Node BullMQ 6.7.0 on one fresh Valkey: ``python -m bench``.

See ``docs/benchmarks.md`` for the workloads, how each is made fair, and the latest results.
"""
