"""Evaluation harness: prompt-set sweeps (single process or Ray actors), per-prompt records, the paper's table.

Kept out of sdvg_core and nodes: it needs Ray (requirements-eval.txt), which a ComfyUI user never installs.
"""
