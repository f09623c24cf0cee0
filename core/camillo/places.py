"""Where a vault is and where new files may go: the vault folder that holds a path, and the check
before writing a file that must not travel with a vault (an export, a grant file, a ``.vmem``).
Pure path checks; any thread may call them.
"""

from __future__ import annotations

import errno
import os

from .errors import UsageError


def vault_folder_holding(path: str) -> str | None:
    """The vault folder that is ``path`` or holds it (the nearest of it and its parents, symbolic
    links resolved, with a ``VMEM`` descriptor in it), or None."""
    folder = os.path.realpath(path)
    while True:
        if os.path.isfile(os.path.join(folder, "VMEM")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


PATH_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                         errno.ENAMETOOLONG, errno.EEXIST})  # writing a new file failed because of the place chosen


def check_new_file(path: str, what: str) -> None:
    """Refuse (UsageError naming the path and what to do) to write ``what`` at ``path`` inside a
    vault folder (it would travel with the vault to every host it syncs to, and could replace one of
    its files), in a folder that does not exist, or over a folder."""
    if not path:
        raise UsageError(f"no file name given; give one for {what}")
    vault = vault_folder_holding(path)
    if vault is not None:
        where = "the vault folder" if vault == os.path.realpath(path) else f"inside the vault folder {vault}"
        raise UsageError(f"{path} is {where}; write {what} outside it (whatever is in a vault folder travels "
                         "with the vault to every host it syncs to, and could replace its files)")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"{folder} is a file, not a folder; write {what} into a folder")
    if not os.path.isdir(folder):
        raise UsageError(f"the folder {folder} does not exist; create it, or write {what} somewhere else")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder; give a file name for {what}")
