"""`python -m sdvg_eval` = `python -m sdvg_eval.eval`: run a sweep (see eval.py)."""
from .eval import main

raise SystemExit(main())
