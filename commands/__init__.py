"""The commands users run: each wires the parts below it into one run and prints what it found.

``cli.py`` parses the command line and calls exactly one function here per subcommand, with
keyword arguments; these return the exit code (0, or 1 for a failed gate) or raise an
``EdgeportError`` that the CLI turns into its one line and exit code.
"""
