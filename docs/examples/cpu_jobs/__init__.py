"""Jobs that docs/examples/child_processes.py runs in child processes (an importable module)."""
