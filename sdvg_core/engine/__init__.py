"""The SDVG algorithm: immutable state, recipes, routing policies, memo, orchestration, report."""
