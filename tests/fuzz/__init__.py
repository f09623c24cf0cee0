"""Hostile-input fuzzing of every VMEM decoder and parser (issue 10, item 1).

``fuzzlib`` holds the mutators, the outcome check and the counters; ``targets`` wires each decoder
of the core to bytes in, with the fixed test keys it needs; ``make_corpus`` writes the seed corpus.
The tests run a short, derandomized profile in CI; ``scripts/fuzz`` runs the long one.  Tests run on
pytest's main thread only.
"""
