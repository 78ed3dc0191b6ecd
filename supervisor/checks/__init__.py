"""Supervisor checks: each a small object with one method, given what it reads."""
