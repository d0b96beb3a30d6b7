# Generated from corral/_async/__init__.py by scripts/unasync.py: do not edit.
"""Hand-written asyncio I/O; scripts/unasync.py generates ``corral/_sync`` from it."""
