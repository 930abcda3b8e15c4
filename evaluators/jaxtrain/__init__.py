"""JAX training tasks: the trusted orchestration (task.py) and the harness mounted into runs (station_jax/)."""
