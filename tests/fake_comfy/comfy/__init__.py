"""Fake `comfy` package (tests only)."""
