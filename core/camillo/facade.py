"""What every method of the vault facade runs first: the thread guard (a Vault is confined to one
thread; the desktop installs a check with :func:`set_thread_guard`) and the lock check, with the
session's guard against a damaged local state (:func:`checked`).

Used by :mod:`camillo.vault` and :mod:`camillo.reading`; the guard is called from any thread (it is
what tells a wrong thread it is one).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from .errors import VaultError

if TYPE_CHECKING:
    from .session import Session


class HasSession(Protocol):
    session: Session


_thread_guard: Callable[[], None] | None = None

Method = TypeVar("Method", bound=Callable[..., Any])


def set_thread_guard(guard: Callable[[], None] | None) -> None:
    """Install a check run at the start of every facade call (None removes it)."""
    global _thread_guard
    _thread_guard = guard


def thread_guard() -> Callable[[], None] | None:
    return _thread_guard  # the check installed with set_thread_guard, if any


def _check_thread() -> None:
    if _thread_guard is not None:
        _thread_guard()


def thread_and_lock_checked(method: Method) -> Method:
    """A facade method: runs the thread guard, and refuses once the vault is locked."""

    @functools.wraps(method)
    def wrapper(self: HasSession, *args: Any, **kwargs: Any) -> Any:
        _check_thread()
        if self.session.locked:
            raise VaultError("the vault is locked; unlock it again to continue")
        return self.session.guarded(method, self, *args, **kwargs)  # a damaged local state is never used

    return cast(Method, wrapper)


checked = thread_and_lock_checked
