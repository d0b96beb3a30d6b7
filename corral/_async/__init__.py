"""Hand-written asyncio I/O; scripts/unasync.py generates ``corral/_sync`` from it."""
