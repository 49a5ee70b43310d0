"""The SDVG algorithm: immutable state, recipes, routing policies, memo, orchestration, report.

Import the public names from `sdvg_core` itself (docs/design.md §3.5); the modules here are the implementation.
"""
