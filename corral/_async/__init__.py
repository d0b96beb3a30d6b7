"""Hand-written asyncio I/O. ``corral/_sync`` is generated from here by scripts/unasync.py."""
