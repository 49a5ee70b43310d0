"""Fake ComfyUI API package (tests only)."""
