"""Lowering: operators a board lacks, rewritten after conversion into operators it has.

One rule per file, each with its proof (the identity that makes it exact, or the measured
bound); ``registry.py`` lists them and runs them by the board's probed op table.
"""
