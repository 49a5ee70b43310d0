"""`python -m sdvg_core.demo`: the command-line demo (see cli.py)."""
import sys

from .cli import main

sys.exit(main())
