"""The embedded default: tiny random models of the exact architectures and the command-line demo (cli.py,
`python -m sdvg_core.demo`)."""
