"""Named devices and "was this you?" (issue 17, items 2 and 3), between real installations (one
CAMILLO_HOME each) on one vault folder.

A device that joins with the passphrase on a new installation, or with a code shown on another
device, is *new* on every other owner device until a device the vault already trusts acknowledges
it; a thief who joined with a stolen passphrase cannot acknowledge its own installations.  Devices
are named when they join and renamed with a signed record that every copy shows."""

from __future__ import annotations

import time

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import UsageError
from camillo.ops.enrollment import Offer
from camillo.session.installation import platform_label
from camillo.values import describe_platform

from .helpers import snapshot, switch_home

PASSPHRASE = "correct horse battery staple"


def open_as(monkeypatch, home, path, name=None):
    switch_home(monkeypatch, home)
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name=name)


def new_names(v):
    return sorted(d.name for d in v.new_devices())


def test_a_device_that_joined_with_the_passphrase_is_new_elsewhere_until_acknowledged(new_vault, tmp_path,
                                                                                      monkeypatch):
    path, vault, _ = new_vault
    first = str(tmp_path / "home")
    vault.lock()
    with open_as(monkeypatch, tmp_path / "work", path, "Work laptop") as w:
        assert new_names(w) == []  # the device that created the vault is not new to anyone
        me = next(d for d in w.devices() if d.this_device)
        assert me.name == "Work laptop" and not me.new and me.joined_with == "your passphrase"
    with open_as(monkeypatch, first, path) as v:
        [d] = v.new_devices()
        assert d.name == "Work laptop" and d.platform == describe_platform(platform_label())
        assert d.joined_with == "your passphrase" and d.to_json()["new"] is True
        assert d.was_this_you().startswith("A new device, 'Work laptop' (")
        assert d.was_this_you().endswith("using your passphrase. Was this you?")
        changes = v.acknowledge_devices(["Work laptop"])
        assert changes.devices and new_names(v) == []
        assert "not new" in v.acknowledge_devices(["Work laptop"]).note  # nothing written twice
    with open_as(monkeypatch, tmp_path / "work", path) as w:
        assert new_names(w) == []
    with open_as(monkeypatch, tmp_path / "third", path, "Desktop") as t:
        assert new_names(t) == []  # acknowledged on a trusted device: everywhere
    with open_as(monkeypatch, first, path) as v:
        assert new_names(v) == ["Desktop"]
    with open_as(monkeypatch, tmp_path / "work", path) as w:
        assert new_names(w) == ["Desktop"]
        w.acknowledge_devices(["Desktop"])  # the work laptop is trusted now: its word counts everywhere
    with open_as(monkeypatch, first, path) as v:
        assert new_names(v) == []


def test_a_thief_with_the_passphrase_cannot_acknowledge_its_own_installations(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    first = str(tmp_path / "home")
    vault.lock()
    open_as(monkeypatch, tmp_path / "thief-1", path, "vm").lock()
    with open_as(monkeypatch, tmp_path / "thief-2", path, "vm 2") as t2:
        assert new_names(t2) == ["vm"]
        t2.acknowledge_devices(["vm"])
        assert new_names(t2) == []  # its own word counts on its own screen only
    with open_as(monkeypatch, tmp_path / "thief-1", path) as t1:
        t1.acknowledge_devices(["vm 2"])
    with open_as(monkeypatch, first, path) as v:
        assert new_names(v) == ["vm", "vm 2"]
        report = v.revoke("vm")
        assert report.still_opens == ("passphrase", "recovery phrase")
        assert new_names(v) == ["vm 2"]  # a revoked device is not asked about any more


def test_a_device_enrolled_by_code_is_new_except_where_the_code_was_shown(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    first = str(tmp_path / "home")
    vault.lock()
    with open_as(monkeypatch, tmp_path / "desk", path, "Desk") as d:
        pass
    with open_as(monkeypatch, first, path) as v:
        v.acknowledge_devices(["Desk"])
        offer = Offer(v.session)
        switch_home(monkeypatch, tmp_path / "phone")
        join = Vault.join(path, offer.qr_text, name="Phone")
        join.start()
        switch_home(monkeypatch, first)
        offer.poll()
        offer.confirm(typed_sas=offer.sas)
        switch_home(monkeypatch, tmp_path / "phone")
        phone = join.poll()
        assert phone is not None
        with phone:
            assert new_names(phone) == []
            me = next(x for x in phone.devices() if x.this_device)
            assert me.joined_with == "a code shown on test laptop"
        switch_home(monkeypatch, first)
        v.refresh()
        assert new_names(v) == []  # this device showed the code and compared the digits
    with open_as(monkeypatch, tmp_path / "desk", path) as d:
        [p] = d.new_devices()
        assert p.name == "Phone" and p.joined_with == "a code shown on test laptop"
        d.acknowledge_devices([p.writer_id.hex()[:12]])
        assert new_names(d) == []
    del d


def test_rename_a_device_everywhere(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    first = str(tmp_path / "home")
    vault.create_grant("reader", {"work": "read"}, str(tmp_path / "reader.grant"))
    vault.lock()
    with open_as(monkeypatch, tmp_path / "second", path, "vm") as s:
        s.append([NewRecord(type="message", text="from the second device")], compartment="work")
    with open_as(monkeypatch, first, path) as v:
        changes = v.rename_device("vm", "Travel laptop")
        assert changes.devices
        assert {d.name for d in v.devices()} == {"test laptop", "Travel laptop"}
        with pytest.raises(UsageError, match="already called 'test laptop'"):
            v.rename_device("Travel laptop", "Test Laptop")
        for bad, why in (("", "cannot be empty"), ("   ", "cannot be empty"), ("x" * 65, "at most 64"),
                         ("tab\u200bname", "invisible"), ("a\x07b", "control")):
            with pytest.raises(UsageError, match=why):
                v.rename_device("Travel laptop", bad)
        with pytest.raises(UsageError, match="no device 'nobody'"):
            v.rename_device("nobody", "Something")
        v.rename_device("test laptop", "Home desktop")  # this device too
    with open_as(monkeypatch, tmp_path / "second", path) as s:
        assert {d.name for d in s.devices()} == {"Home desktop", "Travel laptop"}
        assert next(d for d in s.devices() if d.this_device).name == "Travel laptop"
    # the name is mirrored into every compartment: a read grant of work sees it
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(str(tmp_path / "reader.grant"))) as agent:
        [rec] = [r for r in agent.timeline() if r.text == "from the second device"]
        assert agent.writer_name(rec.writer_id) == "Travel laptop"


def test_concurrent_renames_converge(new_vault, tmp_path, monkeypatch):
    """Two devices rename the same device without seeing each other: every copy shows one name, the
    later rename's, whatever order the records arrive in."""
    path, vault, _ = new_vault
    first = str(tmp_path / "home")
    vault.lock()
    open_as(monkeypatch, tmp_path / "second", path, "vm").lock()
    v = open_as(monkeypatch, first, path)
    s = open_as(monkeypatch, tmp_path / "second", path)
    switch_home(monkeypatch, first)
    v.rename_device("vm", "Name from the first")
    switch_home(monkeypatch, tmp_path / "second")
    real = time.time
    with monkeypatch.context() as later:  # record times are whole seconds: this rename is a few seconds later
        later.setattr(time, "time", lambda: real() + 5)
        s.rename_device("vm", "Name from the second")
    s.refresh()
    switch_home(monkeypatch, first)
    v.refresh()
    names_here = {d.writer_id: d.name for d in v.devices()}
    switch_home(monkeypatch, tmp_path / "second")
    names_there = {d.writer_id: d.name for d in s.devices()}
    assert names_here == names_there and "Name from the second" in names_here.values()
    s.lock()
    v.lock()


def test_default_names_are_the_host_name_made_unique(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    monkeypatch.setattr("camillo.session.installation.socket.gethostname", lambda: "vm")
    for n in range(3):
        assert Vault.is_new_installation(path, str(tmp_path / f"vm-{n}"))
        open_as(monkeypatch, tmp_path / f"vm-{n}", path).lock()
        assert not Vault.is_new_installation(path, str(tmp_path / f"vm-{n}"))
    with open_as(monkeypatch, tmp_path / "vm-0", path) as v:
        assert sorted(d.name for d in v.devices()) == ["test laptop", "vm", "vm (2)", "vm (3)"]


def test_a_bad_device_name_writes_nothing(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    before = snapshot(path)
    switch_home(monkeypatch, tmp_path / "second")
    with pytest.raises(UsageError, match="cannot be empty"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name=" ")
    assert snapshot(path) == before


@pytest.mark.parametrize(("recorded", "said"), [
    ("Linux 6.8.0-31-generic", "Linux"), ("Darwin 23.4.0", "macOS"), ("Windows 10", "Windows"),
    ("macOS laptop", "macOS laptop"), ("Linux laptop", "Linux laptop"), ("", "unknown platform"),
    ("Plan9 4", "Plan9 4"),
])
def test_platforms_are_said_as_people_say_them(recorded, said):
    assert describe_platform(recorded) == said
