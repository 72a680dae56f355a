"""The commands users run: each wires the parts below it (convert, validate, train, runs) into one run."""
