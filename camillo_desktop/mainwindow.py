"""The main window: a sidebar of views, a search field, a notice bar, a status bar, lock and auto-lock.

Layout only, plus the routing of events: the client's ``vault_changed`` goes to every view (each
refreshes only if the Changes concern it, and only when visible), ``vault_locked`` clears them,
closes the record windows, clears the search field and the clipboard (if it still holds what the
app copied), shows the locked page (with "Unlock…") and asks to unlock again.  While locked, the
Lock action, the sidebar and the view shortcuts lead to the unlock dialog.  Locking is idempotent:
a double press or auto-lock at the same moment locks once and asks once.  Auto-lock watches
keyboard and mouse activity application-wide and locks after the configured idle time.

What the person must be told about this device and this copy comes with every open (the info) and
after every change (the client's ``status_reported``): the sync state goes to the status bar, in
the desktop's own words (never "up to date" unless the vault says so), the notices to the notice
bar above the view (:mod:`camillo_desktop.notices`), each shown once until dismissed.  GUI thread
only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from camillo import Cancelled
from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from . import flows, icons, theme
from .actions import SPECS, Action, shortcut_text
from .create_wizard import CreateVaultWizard
from .dialogs import Ask, RecordsDialog, SettingsDialog, UnlockDialog
from .guard import qt_virtual
from .importing import EXPORT_KINDS, IMPORT_KINDS, ImportDialog, export_vault
from .live import LiveRefresh
from .merging import MergeDialog
from .notices import NoticeBar, sync_explanation, sync_label
from .objectstorage import ObjectStorageDialog
from .owner import NewDeviceNotices, VaultSecuritySection
from .search_help import help_button
from .settings import Setting, Settings
from .text import safe_text
from .undo import UndoBar, restore_job
from .views.activity import ActivityView
from .views.base import View
from .views.conflicts import ConflictsView
from .views.conversations import ConversationsView
from .views.detail import DetailPane
from .views.devices import DevicesView
from .views.enroll import EnrollView
from .views.facts import FactsView
from .views.grants import GrantsView
from .views.health import HealthView
from .views.inbox import InboxView
from .views.search import SearchView
from .views.timeline import TimelineView
from .widgets import Clipboard, muted_label
from .wording import plain
from .worker import Changed, describe

# The sidebar, in order.  (Search has no sidebar entry: the search field leads to it.)
VIEW_CLASSES: list[type[View]] = [ConversationsView, TimelineView, FactsView, ConflictsView, InboxView, GrantsView,
                                  DevicesView, EnrollView, ActivityView, HealthView]
FIRST_VIEW = "conversations"  # shown first on a new installation
NARROW = 900  # below this window width the sidebar shows icons only
SIDEBAR_WIDE, SIDEBAR_NARROW = 210, 56


class IdleWatcher(QObject):
    """Application-wide: any key or mouse input counts as activity."""

    became_idle = Signal()
    ACTIVITY = frozenset({QEvent.Type.KeyPress, QEvent.Type.MouseButtonPress, QEvent.Type.MouseMove, QEvent.Type.Wheel,
                          QEvent.Type.TouchBegin})

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.became_idle)
        self.minutes = 0
        self.last_activity = time.monotonic()

    def arm(self, minutes: int) -> None:
        self.minutes = minutes
        self.reset()

    def reset(self) -> None:
        self.last_activity = time.monotonic()
        if self.minutes > 0:
            self.timer.start(int(self.minutes * 60_000))
        else:
            self.timer.stop()

    @qt_virtual(False)
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() in self.ACTIVITY and self.timer.isActive():
            now = time.monotonic()
            if now - self.last_activity > 0.5:  # cheap: restart the timer at most twice a second
                self.reset()
        return False


class MainWindow(QMainWindow):
    view_ready = Signal(str)  # a view's data has loaded (the screenshot mode waits for it)

    def __init__(self, client: Any, settings: Settings) -> None:
        super().__init__()
        self.client = client
        self.settings = settings
        self.setWindowTitle("Camillo")
        self.setWindowIcon(icons.app_icon())
        self.resize(1280, 800)
        self.info: dict[str, Any] = {}
        self.clipboard = Clipboard(settings.get(Setting.CLIPBOARD_SECONDS), self)
        self.actions_: dict[Action, QAction] = {}
        self._build_actions()
        self._build_menu()

        central = QWidget()
        outer = QHBoxLayout(central)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        self.sidebar = QWidget()
        self.sidebar.setObjectName("Sidebar")
        # At most WIDE, at least NARROW: the wide sidebar never holds the window above NARROW's width
        # (the window can always be made narrow enough for the sidebar to collapse to icons).
        self.sidebar.setMinimumWidth(SIDEBAR_NARROW)
        self.sidebar.setMaximumWidth(SIDEBAR_WIDE)
        self.sidebar.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self._narrow = False
        side = QVBoxLayout(self.sidebar)
        side.setContentsMargins(8, 14, 8, 10)
        self.brand = brand = QLabel("Camillo")
        brand.setStyleSheet("font-size: 20px; font-weight: 700; padding: 0 10px 2px 10px;")
        side.addWidget(brand)
        self.vault_name = QLabel("")
        self.vault_name.setObjectName("Muted")
        self.vault_name.setTextFormat(Qt.TextFormat.PlainText)
        self.vault_name.setStyleSheet("padding: 0 10px 10px 10px;")
        side.addWidget(self.vault_name)
        self.nav = QListWidget()
        self.nav.setObjectName("SidebarList")
        self.nav.setIconSize(QSize(18, 18))
        self.nav.setAccessibleName("views")
        side.addWidget(self.nav, 1)
        self.lock_button = QToolButton()
        self.lock_button.setDefaultAction(self.actions_[Action.LOCK])
        self.lock_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.lock_button.setIcon(icons.icon("lock"))
        side.addWidget(self.lock_button)
        outer.addWidget(self.sidebar)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        bar = QWidget()
        bl = QHBoxLayout(bar)
        bl.setContentsMargins(16, 10, 16, 4)
        self.search = QLineEdit()
        self.search.setObjectName("SearchField")
        self.search.setPlaceholderText("Search memory \u2014 words, \"phrases\", type:message, key:user/*, is:pending \u2026  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("search memory")
        self.search.returnPressed.connect(self._search)
        bl.addWidget(self.search, 1)
        self.search_help_button, self.search_help = help_button(self.search, self)
        bl.addWidget(self.search_help_button)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(90)
        self.busy.setMaximumHeight(6)
        self.busy.setTextVisible(False)
        self.busy.hide()
        bl.addWidget(self.busy)
        rl.addWidget(bar)
        self.notice_bar = NoticeBar()
        rl.addWidget(self.notice_bar)
        self.new_devices = NewDeviceNotices(self)  # "Was this you?" for each new device
        rl.addWidget(self.new_devices)
        self.stack = QStackedWidget()
        rl.addWidget(self.stack, 1)
        self.undo_bar = UndoBar()
        self.undo_bar.undo_requested.connect(self._undo)
        undo_row = QHBoxLayout()
        undo_row.setContentsMargins(16, 0, 16, 6)
        undo_row.addWidget(self.undo_bar)
        rl.addLayout(undo_row)
        self.locked_page = self._build_locked_page()
        self.stack.addWidget(self.locked_page)
        self._locked_path: str | None = None  # the vault this window shows, while it is locked
        self._unlocking = False  # the unlock dialog is open (or about to open)
        outer.addWidget(right, 1)
        self.setCentralWidget(central)

        self.pages: dict[str, View] = {}  # the views the stack shows, by name (search included)
        for cls in VIEW_CLASSES:
            self._add_view(cls)
        self.live = LiveRefresh(self)
        self._live_enabled = bool(settings.get(Setting.LIVE))
        self.search_view = SearchView(client, self)
        self._wire_view(self.search_view)
        self.stack.addWidget(self.search_view)
        self.pages["search"] = self.search_view
        self.nav.currentRowChanged.connect(self._nav_changed)

        sb = self.statusBar()
        self.status_vault = QLabel("")
        self.status_cred = QLabel("")
        self.status_sync = QLabel("")
        self.status_clip = QLabel("")
        for w in (self.status_vault, self.status_cred, self.status_sync):
            w.setTextFormat(Qt.TextFormat.PlainText)
            sb.addWidget(w)
            sep = QFrame()
            sep.setFrameShape(QFrame.Shape.VLine)
            sep.setFrameShadow(QFrame.Shadow.Sunken)
            sb.addWidget(sep)
        sb.addPermanentWidget(self.status_clip)

        client.vault_changed.connect(self._changed)
        client.status_reported.connect(self._reported)
        client.vault_locked.connect(self._locked)
        client.busy_changed.connect(self._busy_changed)
        client.job_failed.connect(self._unexpected)
        self.idle = IdleWatcher(self)
        QApplication.instance().installEventFilter(self.idle)
        self.idle.became_idle.connect(self._idle_lock)
        self._clip_timer = QTimer(self)
        self._clip_timer.timeout.connect(self._clip_tick)
        self._clip_deadline = 0.0
        geometry = settings.get(Setting.WINDOW_GEOMETRY)
        if geometry:
            self.restoreGeometry(geometry)
        self.fit_to_screen()

    # ------------------------------------------------------------------ construction

    def _build_actions(self) -> None:
        handlers = {
            Action.NEW_VAULT: self._new_vault, Action.OPEN_VAULT: self._open_vault, Action.LOCK: self.lock,
            Action.FIND: self._focus_search, Action.REFRESH: self.refresh, Action.SETTINGS: self._settings,
            Action.QUIT: self.close, Action.COPY: self._copy_selected, Action.SHORTCUTS: self._shortcuts,
            Action.ABOUT: self._about, Action.OPEN_OBJECT_STORAGE: self._open_object_storage,
        }
        for action, spec in SPECS.items():
            a = QAction(spec.label, self)
            if spec.shortcut is not None:
                a.setShortcut(QKeySequence(spec.shortcut))
            a.setToolTip(spec.tip)
            a.setStatusTip(spec.tip)
            a.triggered.connect(handlers[action])
            self.addAction(a)
            self.actions_[action] = a

    def _build_menu(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&Vault")
        for a in (Action.NEW_VAULT, Action.OPEN_VAULT, Action.OPEN_OBJECT_STORAGE, None, Action.LOCK, Action.REFRESH,
                  None):
            file_menu.addSeparator() if a is None else file_menu.addAction(self.actions_[a])
        self.import_menu = file_menu.addMenu("&Import")
        for kind, (label, _pick, tip) in IMPORT_KINDS.items():
            act = self.import_menu.addAction(label)
            act.setStatusTip(tip)
            act.triggered.connect(lambda _=False, k=kind: self.import_from(k))
        self.merge_action = file_menu.addAction("&Merge another copy\u2026")
        self.merge_action.setStatusTip("Bring in what another copy of this vault (a folder or a .vmem file) has")
        self.merge_action.triggered.connect(self.merge_copy)
        self.export_menu = file_menu.addMenu("&Export")
        for kind, label in EXPORT_KINDS.items():
            act = self.export_menu.addAction(label)
            act.triggered.connect(lambda _=False, k=kind: export_vault(self, k))
        for m in (self.import_menu, self.export_menu, self.merge_action):
            m.setEnabled(False)  # until a vault is open
        file_menu.addSeparator()
        for a in (Action.SETTINGS, None, Action.QUIT):
            file_menu.addSeparator() if a is None else file_menu.addAction(self.actions_[a])
        self.view_menu = mb.addMenu("V&iew")
        edit = mb.addMenu("&Edit")
        edit.addAction(self.actions_[Action.FIND])
        edit.addAction(self.actions_[Action.COPY])
        self.tools_menu = mb.addMenu("&Tools")
        help_menu = mb.addMenu("&Help")
        help_menu.addAction(self.actions_[Action.SHORTCUTS])
        help_menu.addAction(self.actions_[Action.ABOUT])

    def _build_locked_page(self) -> QWidget:
        page = QWidget()
        page.setObjectName("LockedPage")
        lay = QVBoxLayout(page)
        lay.setContentsMargins(48, 48, 48, 48)
        lay.addStretch(1)
        title = QLabel("This vault is locked")
        title.setObjectName("ViewTitle")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(title)
        self.locked_text = muted_label("")
        self.locked_text.setTextFormat(Qt.TextFormat.PlainText)
        self.locked_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.locked_text)
        row = QHBoxLayout()
        row.addStretch(1)
        self.unlock_button = QPushButton("Unlock…")
        self.unlock_button.setObjectName("Primary")
        self.unlock_button.setMinimumHeight(34)
        self.unlock_button.setAccessibleName("unlock the vault")
        self.unlock_button.clicked.connect(self.unlock)
        row.addWidget(self.unlock_button)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addStretch(2)
        return page

    def _add_view(self, cls: type[View]) -> None:
        view = cls(self.client, self)
        self._wire_view(view)
        self.pages[view.name] = view
        self.stack.addWidget(view)
        item = QListWidgetItem(icons.icon(view.icon), view.title)
        item.setData(Qt.ItemDataRole.UserRole, view.name)
        item.setData(Qt.ItemDataRole.AccessibleTextRole, view.title)
        self.nav.addItem(item)
        action = QAction(view.title, self)
        if view.shortcut:
            action.setShortcut(QKeySequence(view.shortcut))
        action.triggered.connect(lambda _=False, n=view.name: self.show_view(n))
        self.addAction(action)
        self.view_menu.addAction(action)

    def _wire_view(self, view: View) -> None:
        view.loaded.connect(lambda n=view.name: self.view_ready.emit(n))
        view.navigate.connect(self.show_view)
        view.status_message.connect(lambda m: self.statusBar().showMessage(m, 8000))
        detail = getattr(view, "detail", None)
        if isinstance(detail, DetailPane):
            detail.thread_requested.connect(self.open_in_thread)
            detail.restore_requested.connect(self.restore_record)

    # ------------------------------------------------------------------ vault lifecycle

    def vault_opened(self, info: dict[str, Any]) -> None:
        self.info = info
        self._locked_path = None
        self.statusBar().clearMessage()
        self.settings.remember_vault(info["path"])
        self.vault_name.setText(safe_text(info["name"], 80, single_line=True))
        self.setWindowTitle(f"{safe_text(info['name'], 80, single_line=True)} \u2014 Camillo")
        self._show_lock_action(locked=False)
        self.search.setEnabled(True)
        self._update_status(info)
        self.notice_bar.show_notices(info["vault_id"], info.get("notices", []))
        self.new_devices.reload()
        for page in self.pages.values():
            if hasattr(page, "set_compartments"):
                page.set_compartments(info["compartments"])
        for v in self.pages.values():
            v._stale = True
        self.idle.arm(self.settings.get(Setting.AUTO_LOCK_MINUTES))
        for a, spec in SPECS.items():
            self.actions_[a].setEnabled(True)
        self.import_menu.setEnabled(not info.get("read_only") and not info.get("agent"))
        self.merge_action.setEnabled(not info.get("read_only") and not info.get("agent"))
        self.export_menu.setEnabled(True)
        if self._live_enabled:
            self.live.start(info["path"])
        last = self.settings.get(Setting.LAST_VIEW)
        self.show_view(last if last in self.pages and last != "search" else FIRST_VIEW)

    def _update_status(self, info: dict[str, Any]) -> None:
        name = safe_text(info["name"], 80, single_line=True)
        self.status_vault.setText(f"Vault: {name}" + (" (read-only)" if info.get("read_only") else ""))
        who = f"agent {info['agent']}" if info.get("agent") else info.get("credential", "")
        self.status_cred.setText(f"Unlocked with: {safe_text(who, 80, single_line=True)}")
        # The core's details name batches and epochs: the person gets the desktop's own words.
        sync = info.get("sync", "")
        self.status_sync.setText(f"\u25cf {sync_label(sync)}")
        self.status_sync.setStyleSheet(f"color: {theme.sync_color(sync)}; font-weight: 600;")
        self.status_sync.setToolTip(sync_explanation(sync))

    def _reported(self, report: dict[str, Any]) -> None:
        """After a change: the vault's sync state and notices (the window's vault only, while open)."""
        if not self.client.is_open or self._locked_path is not None or report["vault_id"] != self.info.get("vault_id"):
            return
        self.info = {**self.info, **report}
        self._update_status(self.info)
        self.notice_bar.show_notices(report["vault_id"], report["notices"])

    @staticmethod
    def refresh_job(ctx: Any) -> Changed:
        """On the worker: read what other devices and agents wrote (the Changes) and describe the vault."""
        changes = ctx.vault.refresh()
        return Changed(changes, describe(ctx.vault))

    def refresh(self) -> None:
        if not self.client.is_open:
            return
        self.client.mutate(self.refresh_job, self.refreshed, self.show_error, context=self, label="refreshing")

    def refreshed(self, result: Changed) -> None:
        if not self.client.is_open or self._locked_path is not None:
            return
        self.info = result.value
        self._update_status(self.info)

    @property
    def locked(self) -> bool:
        """A vault was open in this window and is locked now (or locking)."""
        return self._locked_path is not None or self.client.locking

    def lock(self) -> None:
        """The Lock action: lock the open vault (once, however often it is pressed); while locked,
        the same action unlocks."""
        if self.client.locking:
            return
        if self.client.is_open:
            self.client.lock()
        elif self._locked_path is not None:
            self.unlock()

    def _idle_lock(self) -> None:
        if self.client.is_open and not self.client.locking:
            self.statusBar().showMessage("Locked after inactivity", 10000)
            self.client.lock()

    def _locked(self, ask: bool = True) -> None:
        self.idle.arm(0)
        self.live.stop()
        self.undo_bar.dismiss()
        self.search_help.hide()
        self.import_menu.setEnabled(False)
        self.export_menu.setEnabled(False)
        self.merge_action.setEnabled(False)
        self._close_record_windows()
        for v in self.pages.values():
            v.clear()
        self.search.clear()
        self.search.setEnabled(False)
        self.clipboard.clear_if_ours()  # only if it still holds what the app copied
        self._clip_timer.stop()
        self.status_clip.setText("")
        self.notice_bar.hide_for_lock()
        self.status_sync.setText("\u25cf locked")
        self.status_sync.setStyleSheet("color: #6b7280;")
        self.status_sync.setToolTip("")
        path = self.info.get("path")
        if not path:
            return
        self._locked_path = path
        name = safe_text(self.info.get("name") or path, 80, single_line=True)
        self.locked_text.setText(f"{name}: its keys have left this computer's memory. Unlock it to see your "
                                 "memory again.")
        self._clear_nav()
        self.stack.setCurrentWidget(self.locked_page)
        self._show_lock_action(locked=True)
        if ask and self.isVisible() and not getattr(self, "_quitting", False):
            self._schedule_unlock()

    def _show_lock_action(self, *, locked: bool) -> None:
        lock = self.actions_[Action.LOCK]
        lock.setText("&Unlock\u2026" if locked else SPECS[Action.LOCK].label)
        lock.setToolTip("Unlock the vault again" if locked else SPECS[Action.LOCK].tip)
        lock.setStatusTip(lock.toolTip())
        lock.setEnabled(True)
        for action, spec in SPECS.items():
            if spec.needs_vault and action is not Action.LOCK:
                self.actions_[action].setEnabled(not locked)

    def _close_record_windows(self) -> None:
        """Windows that show decrypted records close when the vault locks."""
        for dlg in self.findChildren(RecordsDialog):
            dlg.wipe()
            dlg.close()
        for dlg in self.findChildren(flows.ReauthDialog):  # its question may quote a record; the vault is gone
            dlg.reject()

    def _schedule_unlock(self) -> None:
        if not self._unlocking:
            self._unlocking = True
            QTimer.singleShot(0, self._unlock_now)

    def _unlock_now(self) -> None:
        self._unlocking = False
        self.unlock()

    def unlock(self) -> None:
        """Ask for the credential of the locked vault (once: a second request while the dialog is
        open does nothing)."""
        path = self._locked_path
        if path is None or self.client.is_open or self.client.locking or self._unlocking:
            return
        self._unlocking = True
        try:
            info = UnlockDialog.ask(self.client, path, self)
        finally:
            self._unlocking = False
        if info:
            self.vault_opened(info)

    def _changed(self, changes: Any) -> None:
        for v in self.pages.values():
            v.on_changes(changes)
        if getattr(changes, "compartment_list", False):  # a compartment was added: every picker shows it
            self.client.submit(lambda ctx: list(ctx.vault.compartments), self._compartments_changed,
                               self.show_error, context=self)

    def _compartments_changed(self, names: list[str]) -> None:
        if self.info is not None:
            self.info["compartments"] = names
        for page in self.pages.values():
            if hasattr(page, "set_compartments"):
                page.set_compartments(names)

    # ------------------------------------------------------------------ navigation

    def show_view(self, name: str, argument: Any = None) -> None:
        view = self.pages.get(name)
        if view is None:
            return
        if self.locked:  # nothing to show: the sidebar and the shortcuts lead to the unlock dialog
            if name != "search":
                self.settings.set(Setting.LAST_VIEW, name)  # shown once unlocked
            self._clear_nav()  # so that clicking the same entry again asks again
            self.stack.setCurrentWidget(self.locked_page)
            if not self.client.locking:
                self._schedule_unlock()
            return
        if name != "search":
            for row in range(self.nav.count()):
                if self.nav.item(row).data(Qt.ItemDataRole.UserRole) == name:
                    self.nav.blockSignals(True)
                    self.nav.setCurrentRow(row)
                    self.nav.blockSignals(False)
            self.settings.set(Setting.LAST_VIEW, name)
        else:
            self.nav.clearSelection()
        self.stack.setCurrentWidget(view)
        if self.client.is_open:
            view.activate(argument)

    def _clear_nav(self) -> None:
        self.nav.blockSignals(True)
        self.nav.setCurrentRow(-1)
        self.nav.clearSelection()
        self.nav.blockSignals(False)

    def current_view(self) -> View:
        return self.stack.currentWidget()

    def _nav_changed(self, row: int) -> None:
        item = self.nav.item(row)
        if item is not None and not self.client.is_open and not self.locked:
            # No vault yet (the list takes a current row when it gets the focus): the welcome screen stays,
            # and the view last shown stays the one shown once a vault opens.
            self._clear_nav()
            return
        if item is not None:
            self.show_view(item.data(Qt.ItemDataRole.UserRole))

    def _focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _search(self) -> None:
        query = self.search.text().strip()
        if not query or not self.client.is_open:
            return
        self.show_view("search", query)  # the view runs this query (not the one it had) and then reports ready

    def erase_record(self, rid: bytes) -> None:
        flows.erase_record(self, rid)

    def import_from(self, kind: str) -> ImportDialog | None:
        """File → Import: the dialog for one kind of export (it runs on the worker)."""
        if not self.client.is_open or self.info.get("read_only"):
            Ask.inform(self, "Import", "Open a vault you can write to first.")
            return None
        dlg = ImportDialog(self, kind)
        dlg.open()
        return dlg

    def show_record(self, rid: bytes) -> None:
        RecordsDialog(self.client, [rid], "Record", self).show()

    def show_records(self, ids: list[bytes], title: str) -> None:
        RecordsDialog(self.client, ids, title, self).show()

    def open_in_thread(self, rid: bytes) -> None:
        """Show the message ``rid`` in its conversation, scrolled to it and highlighted."""
        self.show_view("conversations", rid)

    def restore_record(self, rid: bytes) -> None:
        """A forgotten record, written again (a new record; the forgotten one stays in the history)."""
        job = restore_job(rid)
        self.client.mutate(lambda ctx: job(ctx.vault), lambda _c: self.statusBar().showMessage(
            "Restored: your agents see it again.", 8000), self.show_error, context=self, label="restoring")

    def offer_undo(self, text: str, job: Any, undone: str) -> None:
        """After an action: say what was done, with Undo for a few seconds (see camillo_desktop.undo)."""
        self.undo_bar.offer(text, job, undone)

    def _undo(self, job: Any, undone: str) -> None:
        self.client.mutate(lambda ctx: job(ctx.vault), lambda _c: self.statusBar().showMessage(undone, 8000),
                           self.show_error, context=self, label="undoing")

    def merge_copy(self) -> MergeDialog | None:
        """Vault → Merge another copy."""
        if not self.client.is_open or self.info.get("read_only"):
            Ask.inform(self, "Merge another copy", "Open a vault you can write to first.")
            return None
        dlg = MergeDialog(self)
        dlg.open()
        return dlg

    def show_locked(self, path: str) -> None:
        """The unlock dialog was cancelled at start: the window shows the vault as locked, with its
        menus (open, create, unlock again)."""
        self.info = {"path": path, "name": os.path.basename(path.rstrip("/")) or path}
        self._locked(ask=False)

    # ------------------------------------------------------------------ helpers

    def _busy_changed(self, busy: bool) -> None:
        self.busy.setVisible(busy)
        if not busy:
            self.busy.setRange(0, 0)  # indeterminate until a job reports how far it is

    def show_progress(self, done: int, total: int, what: str = "") -> None:
        """A job's progress: determinate once it knows its total (opening: segments read)."""
        if total > 0:
            self.busy.setRange(0, total)
            self.busy.setValue(min(done, total))
        else:
            self.busy.setRange(0, 0)
        self.busy.setVisible(True)
        if what:
            self.statusBar().showMessage(f"{what}\u2026 {done:,} of {total:,}" if total > 0 else f"{what}\u2026")

    def copy_text(self, text: str) -> None:
        if not text:
            return
        self.clipboard.seconds = self.settings.get(Setting.CLIPBOARD_SECONDS)
        self.clipboard.copy(text)
        self._clip_deadline = time.monotonic() + self.clipboard.seconds
        self._clip_timer.start(500)
        self._clip_tick()

    def _clip_tick(self) -> None:
        left = int(self._clip_deadline - time.monotonic() + 0.99)
        if left <= 0 or not self.clipboard.pending:
            self.status_clip.setText("")
            self._clip_timer.stop()
        else:
            self.status_clip.setText(f"Copied \u2014 the clipboard clears in {left} s")

    def _copy_selected(self) -> None:
        view = self.current_view()
        detail = getattr(view, "detail", None)
        if isinstance(detail, DetailPane) and detail.record is not None:
            self.copy_text(detail.record.text)

    def show_error(self, exc: BaseException) -> None:
        if isinstance(exc, Cancelled):
            return
        self.statusBar().showMessage(safe_text(plain(str(exc)), 400, single_line=True), 15000)

    def _unexpected(self, exc: BaseException, tb: str) -> None:
        Ask.inform(self, "Something went wrong",
                   f"{type(exc).__name__}: {exc}\n\nNothing was changed by the failed step. Please report this.")

    def _settings(self) -> None:
        dlg = SettingsDialog(self.client, self.settings, self)
        if self.client.is_open and self._locked_path is None:  # the open vault's passphrase and trusted people
            dlg.layout().insertWidget(dlg.layout().count() - 1, VaultSecuritySection(self, dlg))
        if dlg.exec():
            self.idle.arm(self.settings.get(Setting.AUTO_LOCK_MINUTES) if self.client.is_open else 0)
            theme.apply(QApplication.instance(), self.settings.get(Setting.THEME))

    def _new_vault(self) -> None:
        if self.client.is_open and not Ask.confirm(self, "New vault", "Lock this vault and create a new one?"):
            return
        info = CreateVaultWizard.run(self.client, self)
        if info:
            self.vault_opened(info)

    def _open_vault(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a vault folder")
        if path:
            info = UnlockDialog.ask(self.client, path, self)
            if info:
                self.vault_opened(info)

    def _open_object_storage(self) -> None:
        location = ObjectStorageDialog.ask(self.client, self)
        if location:
            info = UnlockDialog.ask(self.client, location, self)
            if info:
                self.vault_opened(info)

    def _shortcuts(self) -> None:
        ellipsis = "\u2026"
        rows = [f"{shortcut_text(spec):<14} {spec.label.replace('&', '').rstrip(ellipsis)}" for spec in SPECS.values()
                if spec.shortcut is not None]
        rows += [f"{v.shortcut:<14} {v.title}" for v in self.pages.values() if v.shortcut]
        rows.append(f"{'Esc':<14} Clear the search field")
        Ask.inform(self, "Keyboard shortcuts", "\n".join(rows))

    def _about(self) -> None:
        from importlib import metadata

        try:
            version = metadata.version("camillo")
        except metadata.PackageNotFoundError:
            version = "development"
        Ask.inform(self, "About Camillo", f"Camillo {version}\nUser-owned, encrypted agent memory (VMEM v1).")

    @qt_virtual()
    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_Escape and self.search.hasFocus():
            self.search.clear()
            return
        super().keyPressEvent(event)

    def fit_to_screen(self) -> None:
        """Keep the window inside the screen's available area (at any scale factor): a remembered or
        default size larger than the screen shrinks to it, a window off the screen moves back."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            return
        area = screen.availableGeometry()
        frame = self.frameGeometry()
        extra_w, extra_h = frame.width() - self.width(), frame.height() - self.height()
        w = min(self.width(), area.width() - extra_w)
        h = min(self.height(), area.height() - extra_h)
        if (w, h) != (self.width(), self.height()):
            self.resize(max(w, 320), max(h, 240))
        frame = self.frameGeometry()
        x = min(max(frame.x(), area.x()), area.right() - frame.width() + 1)
        y = min(max(frame.y(), area.y()), area.bottom() - frame.height() + 1)
        if (x, y) != (frame.x(), frame.y()):
            self.move(x, y)

    @property
    def sidebar_collapsed(self) -> bool:
        return self._narrow

    def _fit_sidebar(self) -> None:
        """Below NARROW pixels of width the sidebar shows its views' icons only (names in tooltips)."""
        narrow = self.width() < NARROW
        if narrow == self.sidebar_collapsed:
            return
        self._narrow = narrow
        self.sidebar.setMaximumWidth(SIDEBAR_NARROW if narrow else SIDEBAR_WIDE)
        self.brand.setVisible(not narrow)
        self.vault_name.setVisible(not narrow)
        self.lock_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly if narrow
                                            else Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for row in range(self.nav.count()):
            item = self.nav.item(row)
            title = item.data(Qt.ItemDataRole.AccessibleTextRole)
            item.setText("" if narrow else title)
            item.setToolTip(title if narrow else "")

    @qt_virtual()
    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_sidebar()

    @qt_virtual()
    def closeEvent(self, event) -> None:
        self._quitting = True
        self.settings.set(Setting.WINDOW_GEOMETRY, self.saveGeometry())
        self.clipboard.clear_if_ours()
        super().closeEvent(event)
