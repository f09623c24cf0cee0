"""Registers the views that act on memory (conflicts, inbox, grants, devices, enrollment, health,
activity) with the main window's sidebar.  Imported by the app at start-up; GUI thread only."""

from __future__ import annotations
