"""What the desktop tells the person about this device and this copy of the vault, in plain words.

The core reports through ``Vault.notices()`` what happened to this device: its changes refused by
every copy (``rejected-writes``), changes sealed again after another device's erasure
(``sealed-again``), its key replaced by an erasure elsewhere (``key-rotated``), this device revoked
(``revoked``), a key waiting for two changes to be joined (``waiting-for-join``) or for the passphrase
last used here (``key-sealed-elsewhere``), a passphrase changed elsewhere that still opened this
device's key (``passphrase-replaced``), a view that may be incomplete (``incomplete``); and through ``Vault.sync_status()``
whether this copy is complete.  The core's messages speak the file format's language, so the
desktop never shows them: every kind and every sync state has its own sentence here, and a kind
this version does not know gets a generic one (nothing is dropped silently).

:class:`NoticeBar` shows each notice of a vault once, above the current view, until the person
dismisses it (never a modal dialog).  Asking the core again (every refresh and every change asks)
does not show a notice again: it stays until dismissed, and once dismissed it comes back only if
the core says something new.  While the vault is locked the bar is hidden; notices not dismissed yet
are shown again when the same vault is unlocked.  ``incomplete`` is the status bar's (see
:func:`sync_label`), not the bar's.

GUI thread only (the notices are fetched on the vault worker: :func:`camillo_desktop.worker.report`).
"""

from __future__ import annotations

from collections.abc import Iterable

from camillo import Notice
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QStyle, QVBoxLayout, QWidget

# kind -> (tone, sentence), in the order the bar shows them (a revocation explains refused changes).
# "warn": the person may want to act; "info": nothing was lost.
NOTICE_TEXT: dict[str, tuple[str, str]] = {
    "revoked": ("warn", "This device was revoked by another of your devices: they refuse what it writes. To use "
                        "this vault here again, lock it, unlock it with your passphrase or recovery phrase and "
                        "choose to register this device again."),
    "rejected-writes": ("warn", "Some changes made on this device were refused by your other devices, so they are "
                                "not part of your memory. This happens when a device keeps writing after it was "
                                "revoked."),
    "sealed-again": ("info", "Changes made here while another device was erasing something were kept: they were "
                             "sealed again under the new keys, so all your devices can read them."),
    "key-rotated": ("info", "This device's key was replaced because an erasure on another of your devices "
                            "destroyed keys it held. The old key can no longer open old copies of the vault."),
    "waiting-for-join": ("warn", "Another of your devices changed the vault's keys at the same time as this one. "
                                 "This device can read but not change anything until the two changes are joined: "
                                 "lock the vault and unlock it once with the passphrase you last used on this "
                                 "device (or open the vault on the other device, if it has both)."),
    "key-sealed-elsewhere": ("warn", "This device's key is protected by the passphrase you last used on it, which "
                                     "another of your devices did not know about when it changed the vault's keys. "
                                     "This device can read but not change anything: lock the vault and unlock it "
                                     "once with the passphrase you last used on this device."),
    "passphrase-replaced": ("info", "The passphrase you typed was changed on another of your devices. It still "
                                    "opened this device's own key this time: use the passphrase set on the other "
                                    "device from now on."),
}
UNKNOWN_NOTICE = ("warn", "Something happened to this device that Camillo cannot describe yet. Update Camillo to "
                          "see what it is.")
SHOWN_BY_THE_STATUS_BAR = frozenset({"incomplete"})

# sync_status().state -> (status bar label, explanation).  Anything else is never "up to date".
SYNC_TEXT: dict[str, tuple[str, str]] = {
    "up to date": ("up to date", "Everything your devices wrote that this device knows of is here."),
    "syncing": ("syncing", "Some changes your devices made have not arrived here yet: what you see may be "
                           "incomplete for a while."),
    "missing batches": ("changes missing", "Some changes your devices made have still not arrived after a long "
                                           "wait: what you see is incomplete. Check that your devices sync this "
                                           "folder."),
    "rollback alert": ("rollback alert", "Changes this device saw before have vanished from the vault folder: the "
                                         "storage may have been rolled back to an older copy. If you restored an "
                                         "older copy yourself, accept the vault as it is (Health)."),
}
UNKNOWN_SYNC = ("may be incomplete", "This view of the vault may be incomplete.")
_TONES = {sentence: tone for tone, sentence in [*NOTICE_TEXT.values(), UNKNOWN_NOTICE]}
_ORDER = {sentence: i for i, (_tone, sentence) in enumerate([*NOTICE_TEXT.values(), UNKNOWN_NOTICE])}


def notice_text(kind: str) -> tuple[str, str]:
    """(tone, sentence) the desktop shows for a notice of ``kind``."""
    return NOTICE_TEXT.get(kind, UNKNOWN_NOTICE)


def sync_label(state: str) -> str:
    """The status bar's words for a ``sync_status().state`` ("up to date" only for that state)."""
    return SYNC_TEXT.get(state, UNKNOWN_SYNC)[0]


def sync_explanation(state: str) -> str:
    """What a ``sync_status().state`` means for the person (the status bar's tooltip, Health)."""
    return SYNC_TEXT.get(state, UNKNOWN_SYNC)[1]


class NoticeRow(QFrame):
    """One sentence and its "Dismiss" button."""

    dismissed = Signal(str)

    def __init__(self, tone: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Notice")
        self.setProperty("tone", tone)
        self.text = text
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        mark = QLabel()
        mark.setObjectName("NoticeMark")
        kind = QStyle.StandardPixmap.SP_MessageBoxWarning if tone == "warn" else QStyle.StandardPixmap.SP_MessageBoxInformation
        mark.setPixmap(self.style().standardIcon(kind).pixmap(QSize(18, 18)))
        lay.addWidget(mark, 0, Qt.AlignmentFlag.AlignVCenter)
        self.label = QLabel(text)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.dismiss = QPushButton("Dismiss")
        self.dismiss.setAccessibleName("dismiss this notice")
        self.dismiss.setToolTip("Hide this notice; it is not shown again")
        self.dismiss.clicked.connect(lambda: self.dismissed.emit(self.text))
        lay.addWidget(self.dismiss, 0, Qt.AlignmentFlag.AlignVCenter)


class NoticeBar(QFrame):
    """The notices of the open vault, one row per sentence, each shown until dismissed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("NoticeBar")
        self.setAccessibleName("notices about this device")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(16, 4, 16, 6)
        self._layout.setSpacing(6)
        self._vault: str | None = None
        # vault id -> sentence -> the notices it stands for (kind, core message), not dismissed yet
        self._pending: dict[str, dict[str, set[tuple[str, str]]]] = {}
        self._dismissed: set[tuple[str, str, str]] = set()  # (vault id, kind, core message)
        self.rows: list[NoticeRow] = []
        self.hide()

    def show_notices(self, vault_id: str, notices: Iterable[Notice]) -> None:
        """The notices the core reported for the vault ``vault_id``: new ones are added, those already shown or dismissed are not shown again."""
        self._vault = vault_id
        pending = self._pending.setdefault(vault_id, {})
        known = set().union(*pending.values()) if pending else set()
        for notice in notices:
            if notice.kind in SHOWN_BY_THE_STATUS_BAR:
                continue
            key = (notice.kind, notice.message)
            if key in known or (vault_id, *key) in self._dismissed:
                continue
            pending.setdefault(notice_text(notice.kind)[1], set()).add(key)
            known.add(key)
        self._render()

    def hide_for_lock(self) -> None:
        """The vault locked: nothing of it is shown (what was not dismissed comes back on unlock)."""
        self._vault = None
        self._render()

    def texts(self) -> list[str]:
        """The sentences shown now, top to bottom."""
        return [row.text for row in self.rows]

    def dismiss(self, text: str) -> None:
        if self._vault is None:
            return
        for kind, message in self._pending.get(self._vault, {}).pop(text, set()):
            self._dismissed.add((self._vault, kind, message))
        self._render()

    def _render(self) -> None:
        wanted = sorted(self._pending.get(self._vault, {}) if self._vault is not None else [], key=_ORDER.__getitem__)
        if wanted == self.texts():
            self.setVisible(bool(wanted))
            return
        for row in self.rows:
            self._layout.removeWidget(row)
            row.hide()
            row.deleteLater()
        self.rows = []
        for text in wanted:
            row = NoticeRow(_TONES.get(text, "warn"), text, self)
            row.dismissed.connect(self.dismiss)
            self._layout.addWidget(row)
            self.rows.append(row)
        self.setVisible(bool(wanted))
