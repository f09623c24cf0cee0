"""Keeping Python exceptions out of Qt's C++ frames.

Qt calls the app's overrides of its virtual functions (``data``, ``rowCount``, ``fetchMore``,
``isComplete``, ``validatePage``, ``paintEvent``, ``eventFilter``, ``closeEvent`` ...) from C++.
An exception raised there cannot travel through Qt's frames: PySide6 prints it and carries on with
an unspecified return value, and inside some calls (a QWizard closing and asking its page whether
it is complete) that has crashed the app.  :func:`qt_virtual` wraps such an override: an exception
is reported through ``sys.excepthook`` (printed in the app; a test failure under pytest-qt) and the
override returns a safe default instead.

The decorated methods run on whatever thread Qt calls them on; in this app, the GUI thread only.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def qt_virtual(default: Any = None, *, factory: Callable[[], Any] | None = None) -> Callable[[F], F]:
    """Decorate a Qt virtual override: on an exception, report it and return ``default`` (or a fresh
    ``factory()``, for values such as ``QModelIndex()`` that must not be shared)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:  # nothing may escape into Qt's C++ frames
                report_exception()
                return factory() if factory is not None else default

        return guarded  # type: ignore[return-value]

    return wrap


def report_exception() -> None:
    """Hand the exception being handled to ``sys.excepthook``, which must not raise either."""
    try:
        sys.excepthook(*sys.exc_info())
    except Exception:  # noqa: S110 - a broken hook must not take the app down
        pass
