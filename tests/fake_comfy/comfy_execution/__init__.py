"""Fake `comfy_execution` package (tests only)."""
