"""The commands users run: each wires the parts below it into one run and prints what it found.

``cli.py`` calls one function here per subcommand, with keyword arguments; each returns the exit
code (0, or 1 for a failed gate) or raises an ``EdgeportError`` for the CLI's one-line report.
"""
