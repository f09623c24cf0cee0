"""Registers the views that act on memory (conflicts, inbox, grants, devices, enrollment, health,
activity) with the main window's sidebar.  Imported by the app at start-up; GUI thread only."""

from __future__ import annotations

from .mainwindow import register_view
from .views.activity import ActivityView
from .views.conflicts import ConflictsView
from .views.devices import DevicesView
from .views.enroll import EnrollView
from .views.grants import GrantsView
from .views.health import HealthView
from .views.inbox import InboxView

for cls in (ConflictsView, InboxView, GrantsView, DevicesView, EnrollView, ActivityView, HealthView):
    register_view(cls)
