"""Typed settings: every key comes from :class:`Setting`, never a raw string (KeePassXC's Config).

Stored with QSettings (organisation "Camillo", application "Camillo").  GUI thread only.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from PySide6.QtCore import QSettings


class Setting(Enum):
    # name = (key, default)
    AUTO_LOCK_MINUTES = ("security/auto_lock_minutes", 5)
    CLIPBOARD_SECONDS = ("security/clipboard_clear_seconds", 15)
    THEME = ("appearance/theme", "system")  # system | light | dark
    RECENT_VAULTS = ("vaults/recent", "[]")
    WINDOW_GEOMETRY = ("window/main_geometry", b"")
    WINDOW_STATE = ("window/main_state", b"")
    LAST_VIEW = ("window/last_view", "conversations")
    LIVE = ("vault/watch_folder", True)  # show other devices' and agents' writes as they arrive

    @property
    def key(self) -> str:
        return self.value[0]

    @property
    def default(self) -> Any:
        return self.value[1]


class Settings:
    def __init__(self, store: QSettings | None = None) -> None:
        self._s = store or QSettings("Camillo", "Camillo")

    def get(self, setting: Setting) -> Any:
        value = self._s.value(setting.key, setting.default)
        default = setting.default
        if isinstance(default, bool):
            return value in (True, "true", "1", 1)
        if isinstance(default, int):
            try:
                return int(value)
            except (TypeError, ValueError):
                return default
        return value

    def set(self, setting: Setting, value: Any) -> None:
        self._s.setValue(setting.key, value)

    def recent_vaults(self) -> list[str]:
        try:
            items = json.loads(self.get(Setting.RECENT_VAULTS) or "[]")
        except ValueError:
            items = []
        return [x for x in items if isinstance(x, str)]

    def remember_vault(self, path: str) -> None:
        items = [p for p in self.recent_vaults() if p != path]
        self.set(Setting.RECENT_VAULTS, json.dumps([path, *items][:8]))

    def sync(self) -> None:
        self._s.sync()
