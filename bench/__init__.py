"""Benchmark harness: turnout vs. smg vs. direct-to-worker (run ``python bench/run.py``)."""
