"""A CPU stand-in for torchtitan's `torchtitan.train` entry point (see train.py); only on PYTHONPATH in tests."""
