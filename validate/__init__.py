"""Runners (one per back end), comparators with typed results, and report renderers."""
