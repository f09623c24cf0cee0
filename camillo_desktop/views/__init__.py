"""The main window's views, one module each.  GUI thread only."""
