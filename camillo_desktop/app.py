"""``camillo-desktop``: start the vault browser.

``camillo-desktop [VAULT]`` opens a vault folder or ``.vmem`` file (asking how to unlock it);
without one it shows the welcome screen (create, open, recent vaults, try the demo).
Cancelling the unlock dialog leaves the window on a locked screen, with its menus.
``--demo`` builds a fresh demo vault and opens it (``--demo-dir DIR`` keeps it in DIR and reuses
it next time).  ``--view NAME --screenshot OUT.png`` renders the main window at 1280x800 on that view
once its data has loaded, saves it and exits (works under ``QT_QPA_PLATFORM=offscreen`` and under
Xvfb; ``QT_SCALE_FACTOR=2`` renders at scale 2); ``--view conversations`` shows the demo's newest
conversation; ``--view welcome`` shows (and renders) the welcome screen instead of a vault.  An unknown ``--view`` is refused at once (exit 2, with the list of views).  Demo vaults built
in a temporary folder (``--demo`` without ``--demo-dir``, or "Try the demo vault" on the welcome
screen) are removed on quit.

Garbage collection (:func:`install_gc_policy`): an open vault keeps hundreds of thousands of
long-lived Python objects (its state, on the worker thread, but in the same heap).  CPython's full
collections walk every tracked object while holding the GIL, so each one stalls the GUI thread for
as long as it takes (100 ms and more with 100k records).  Once a vault is open its objects live as
long as it does, so the app moves them out of the collector's way with ``gc.freeze()``: later full
collections scan only what was allocated since.  While a vault opens, collections are disabled (the
heap grows by millions of objects at 1M records, and each full collection would walk it) and the
worker freezes the new objects as soon as the open succeeds.  Locking unfreezes them (the vault's
objects are dropped; any cycles among them must be collectable) and collects once, while nothing is
shown.  The young-generation threshold is raised from 700 to 5,000 allocations, so decoding a page
of records does not run dozens of small collections.

Runs on the main (GUI) thread; every vault call goes to the vault worker thread.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
from typing import Any

APP_ID = "org.camillo.Camillo"
# Every view --view accepts (MainWindow.pages; a test checks they agree).  Kept here so that a typo is
# refused before Qt starts.
VIEW_NAMES = ("conversations", "timeline", "facts", "conflicts", "inbox", "grants", "devices", "enroll", "activity",
              "health", "search")
WELCOME = "welcome"  # --view welcome: the welcome screen (no vault open), not a view of the main window
GC_THRESHOLD0 = 5_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="camillo-desktop", description="Camillo: your agents' memory, yours.")
    p.add_argument("vault", nargs="?", help="a vault folder or .vmem file")
    p.add_argument("--demo", action="store_true", help="open a freshly generated demo vault")
    p.add_argument("--demo-dir", metavar="DIR",
                   help="with --demo: keep the demo vault in DIR, reusing the one built there before")
    p.add_argument("--view", default=None, choices=(*VIEW_NAMES, WELCOME), metavar="NAME",
                   help="the view to show first: " + ", ".join((*VIEW_NAMES, WELCOME)))
    p.add_argument("--search", default=None, help="with --view search: the query to run")
    p.add_argument("--screenshot", metavar="OUT.png", help="render the window to a PNG once loaded, then exit")
    p.add_argument("--theme", choices=["system", "light", "dark"], help="appearance (default: settings)")
    p.add_argument("--size", default="1280x800", help="window size for --screenshot (default 1280x800)")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p.parse_args(argv)


def install_gc_policy(client: Any) -> None:
    """Freeze the heap once a vault is open, unfreeze and collect once it is locked (see the
    module docstring).  GUI thread."""
    from PySide6.QtCore import QTimer

    first, *rest = gc.get_threshold()
    gc.set_threshold(max(first, GC_THRESHOLD0), *rest)

    state = {"open": False}

    def opened(_info: Any) -> None:
        # The worker froze the vault's objects as it finished opening (VaultClient.open_vault).
        if state["open"]:  # another vault replaced the one frozen: let its cycles go first
            gc.unfreeze()
            gc.collect()
            gc.freeze()
        state["open"] = True
        QTimer.singleShot(0, gc.freeze)  # and the first view's, once it is built

    def locked() -> None:
        state["open"] = False
        gc.unfreeze()
        QTimer.singleShot(0, gc.collect)

    client.vault_opened.connect(opened)
    client.vault_locked.connect(locked)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        from importlib import metadata

        print(f"camillo-desktop {metadata.version('camillo')}")
        return 0
    if args.screenshot and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from . import icons, theme
    from .mainwindow import MainWindow
    from .settings import Setting, Settings
    from .worker import VaultClient, install_thread_guard

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Camillo")
    app.setOrganizationName("Camillo")
    app.setApplicationDisplayName("Camillo")
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(icons.app_icon())
    settings = Settings()
    theme.apply(app, args.theme or settings.get(Setting.THEME))
    install_thread_guard()
    client = VaultClient()
    install_gc_policy(client)
    window = MainWindow(client, settings)
    if args.screenshot:
        w, h = (int(x) for x in args.size.lower().split("x"))
        window.resize(w, h)
    state: dict[str, Any] = {"rc": 0, "temp_dirs": []}  # temp_dirs: removed on quit

    def opened(info: dict[str, Any]) -> None:
        window.show()
        window.vault_opened(info)
        if args.view:
            if args.view == "search":
                window.search.setText(args.search or "coffee")
                window._search()
            else:
                window.show_view(args.view)

    def failed(exc: BaseException) -> None:
        from .dialogs import Ask

        Ask.inform(None, "Camillo", f"The vault could not be opened: {exc}")
        state["rc"] = 4
        app.quit()

    if args.screenshot and args.view != WELCOME:
        target = args.view or "conversations"
        saved = {"done": False}

        def save() -> None:
            if saved["done"]:
                return
            saved["done"] = True
            window.grab().save(args.screenshot)
            app.quit()

        window.view_ready.connect(lambda name: QTimer.singleShot(400, save) if name == target else None)
        QTimer.singleShot(90_000, lambda: (state.update(rc=1), save()))

    if args.view == WELCOME:
        show_welcome(client, settings, state, opened, args.screenshot, args.size)
    elif args.demo:
        from camillo import DEMO_PASSPHRASE, Unlock, Vault, build_demo_vault

        if args.demo_dir:
            base = os.path.abspath(args.demo_dir)
            os.makedirs(base, exist_ok=True)
        else:
            base = tempfile.mkdtemp(prefix="camillo-demo-")
            state["temp_dirs"].append(base)
        path = os.path.join(base, "Demo vault")
        homes = os.path.join(base, "homes")
        built = os.path.join(base, ".built")

        def opener(ctx):
            if not os.path.exists(built):
                shutil.rmtree(path, ignore_errors=True)
                shutil.rmtree(homes, ignore_errors=True)
                build_demo_vault(path, home=homes, progress=lambda m: ctx.progress(0, 0, m))
                open(built, "w").close()  # an empty marker: the build completed
            return Vault.open(path, Unlock.passphrase(DEMO_PASSPHRASE), home=os.path.join(homes, "desktop"),
                              progress=lambda d, t: ctx.progress(d, t, "Reading the vault"))

        window.statusBar().showMessage("Building the demo vault\u2026")
        client.open_vault(opener, opened, failed, context=window, on_progress=window.show_progress)
        if not args.screenshot:
            window.show()
    elif args.vault:
        from .dialogs import UnlockDialog

        path = os.path.abspath(args.vault)
        info = UnlockDialog.ask(client, path)
        if info is None:  # cancelled: the window shows the vault locked, its menus at hand
            window.show_locked(path)
            window.show()
        else:
            opened(info)
    else:
        show_welcome(client, settings, state, opened)

    try:
        rc = app.exec()
    finally:
        client.shutdown()
        for directory in state["temp_dirs"]:
            shutil.rmtree(directory, ignore_errors=True)
    return state["rc"] or rc


def show_welcome(client: Any, settings: Any, state: dict[str, Any], opened: Any, screenshot: str | None = None,
                 size: str = "1280x800") -> None:
    """Show the welcome screen (no vault open); with ``screenshot``, render it to that PNG and quit."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from .welcome import WelcomeWindow

    welcome = WelcomeWindow(client, settings)
    welcome.opened.connect(lambda info: (welcome.close(), opened(info)))
    welcome.temp_dir_created.connect(state["temp_dirs"].append)
    state["welcome"] = welcome
    if screenshot:
        w, h = (int(x) for x in size.lower().split("x"))
        welcome.resize(w, h)

        def save() -> None:
            welcome.grab().save(screenshot)
            QApplication.quit()

        QTimer.singleShot(400, save)
    welcome.show()


if __name__ == "__main__":
    sys.exit(main())
