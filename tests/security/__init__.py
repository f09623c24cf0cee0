"""Security tests (issue 10, items 4 and 6): crypto hygiene (nonces, constant-time comparisons,
wiping on lock), no secrets in logs, reprs or messages, and the threat-model claims of
docs/security.md that no other test backs.  Tests run on pytest's main thread only.
"""
