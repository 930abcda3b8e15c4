"""Code the station mounts read-only into every JAX training run (importable there as `station_jax`)."""
