"""Camillo desktop: the PySide6 vault browser on top of the ``camillo`` core facade."""
