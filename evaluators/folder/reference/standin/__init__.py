"""Holds the stand-in `station` package. Only the scorer's sandbox imports it, as `station`, with this
folder first on its import path; the station's own process never does (docs/tasks.md)."""
