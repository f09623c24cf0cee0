"""Tests of the packaging: the freedesktop files (always) and the installed .deb (opt-in)."""
