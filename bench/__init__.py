"""Benchmarks: whole-run measurements that tests never make. `make bench` runs them all."""
