"""Resource faults: a full disk (under the vault, or under this installation's local state), a
read-only vault folder, a missing keychain (no D-Bus session) and a locked one.

In each case the operation must fail with a specific error that names the thing (the file, the
folder, the keychain) and says what to do; nothing acknowledged may be lost; the vault folder must be
unchanged (every file hashed before and after; empty directories a failed write created are not
files and readers ignore them); and once the resource is back the same operation must succeed on a
vault that verifies clean.

Disk-full cases run on a small tmpfs mounted for the test (root only; skipped with the reason when
mounting is not permitted), filled to leave 0..N free pages so that multi-file operations (erasure,
revocation, compaction, grants) fail at different points.  Read-only cases remount that tmpfs
read-only, or bind-mount a folder read-only (root bypasses permission bits, so chmod would prove
nothing).  Keychain cases run the product in subprocesses inside a private D-Bus session with
gnome-keyring (skipped when those are not installed), then without the session, then with the
collection locked.

pytest main thread only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import ReadOnlyVault, StorageError, VaultError, WrongCredential

from tests.reliability.conftest import count
from tests.reliability.harness import scale
from tests.reliability.scenarios import PASSPHRASE

SUITE = "resource faults (cases)"
PAGE = 4096


# ---------------------------------------------------------------------------------------------- helpers


def files_of(path: str) -> dict[str, str]:
    """Every file under ``path`` (dot files included) -> SHA-256."""
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


class Mounts:
    def __init__(self, base: str) -> None:
        self.base = base
        self.mounted: list[str] = []
        self.n = 0

    def tmpfs(self, size: str = "4m") -> str:
        self.n += 1
        target = os.path.join(self.base, f"mnt{self.n}")
        os.makedirs(target)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", target], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here (needs root with CAP_SYS_ADMIN): {proc.stderr.strip()}")
        self.mounted.append(target)
        return target

    def read_only(self, target: str) -> None:
        subprocess.run(["mount", "-o", "remount,ro", target], check=True)

    def bind_read_only(self, source: str) -> str:
        self.n += 1
        target = os.path.join(self.base, f"ro{self.n}")
        os.makedirs(target)
        proc = subprocess.run(["mount", "--bind", source, target], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"bind mounts are not permitted here: {proc.stderr.strip()}")
        self.mounted.append(target)
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
        return target

    def unmount_all(self) -> None:
        for target in reversed(self.mounted):
            subprocess.run(["umount", target], check=False)
        self.mounted.clear()


@pytest.fixture
def mounts(tmp_path):
    m = Mounts(str(tmp_path))
    yield m
    m.unmount_all()


def fill(path: str, keep_pages: int) -> str:
    """Fill the file system of ``path`` so that only ``keep_pages`` pages stay free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    filler = os.path.join(path, "filler")
    with open(filler, "ab") as fh:
        fh.write(b"\0" * max(0, free - keep_pages * PAGE))
    return filler


def assert_clear(exc: VaultError, *words: str) -> None:
    text = str(exc)
    missing = [w for w in words if w.lower() not in text.lower()]
    assert not missing, f"the message {text!r} does not say {missing}"


# ---------------------------------------------------------------------------------------------- a vault to break


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A vault (folder and homes) with two devices, records, a grant, small segments to compact."""
    base = str(tmp_path_factory.mktemp("resources"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        path = os.path.join(base, "v")
        vault, phrase = Vault.create(path, PASSPHRASE, device_name="alpha", home=os.path.join(base, "home"))
        records = {}
        with vault:
            for i in range(6):
                rid = vault.append([NewRecord(type="message", text=f"kept {i}")]).written[0]
                records[rid.hex()] = f"kept {i}"
            vault.append([NewRecord(type="fact", key="user/city", value="Porto")])
            vault.create_grant("helper", {"work": "read"}, os.path.join(base, "helper.grant"))
        with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=os.path.join(base, "home-beta"),
                        device_name="beta") as b:
            beta = b.writer_id.hex()
    return {"base": base, "records": records, "target": next(iter(records)), "beta": beta, "phrase": phrase}


def place(template, where: str, *, home_in: str | None = None) -> tuple[str, str]:
    """Copy the template vault into ``where`` (and its home into ``home_in``); (vault path, home)."""
    path = os.path.join(where, "v")
    shutil.copytree(os.path.join(template["base"], "v"), path)
    home = os.path.join(home_in or where + "-homes", "home")
    shutil.copytree(os.path.join(template["base"], "home"), home)
    return path, home


def verify_clean(template, path: str, tmp: str, extra: dict[str, str] | None = None) -> None:
    with Vault.open(path, Unlock.recovery(template["phrase"]), home=os.path.join(tmp, "fresh"), register=False,
                    cache=False) as v:
        problems = v.problems(full=True)
        assert not problems, [(p.kind, p.message) for p in problems]
        for rid, text in {**template["records"], **(extra or {})}.items():
            r = v.record(bytes.fromhex(rid))
            assert r is not None and (r.erased or r.text == text), f"record {rid[:12]} ({text!r}) was lost"
    shutil.rmtree(os.path.join(tmp, "fresh"), ignore_errors=True)


OPS = {
    "append": lambda v, t, tmp: v.append([NewRecord(type="message", text="one more")]),
    "bulk import": lambda v, t, tmp: v.append([NewRecord(type="message", text="y" * 1000) for _ in range(3000)]),
    "compact": lambda v, t, tmp: v.compact(prune_now=True),
    "erase": lambda v, t, tmp: v.erase([bytes.fromhex(t["target"])]),
    "revoke a device": lambda v, t, tmp: v.revoke(t["beta"], reason="lost"),
    "revoke a grant": lambda v, t, tmp: v.revoke("helper"),
    "change passphrase": lambda v, t, tmp: v.change_passphrase("another passphrase entirely"),
    "create a grant": lambda v, t, tmp: v.create_grant(
        "writer", {"personal": "write"}, os.path.join(tmp, f"g{len(os.listdir(tmp))}.grant")),
}

KEEP = [0, 1, 2, 3, 5, 8, 12, 16] if scale() >= 2 else [0, 1, 3, 8]


@pytest.mark.parametrize("op", list(OPS))
def test_a_full_vault_disk_changes_nothing(op, template, mounts, tmp_path):
    failed = 0
    for keep in KEEP:
        disk = mounts.tmpfs("4m")
        path, home = place(template, disk, home_in=str(tmp_path / f"h{keep}"))
        grants = str(tmp_path / f"grants{keep}")
        os.makedirs(grants)
        with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as v:
            filler = fill(disk, keep)
            before = files_of(path)
            try:
                OPS[op](v, template, grants)
            except VaultError as exc:
                failed += 1
                assert isinstance(exc, StorageError), f"{op}: {type(exc).__name__}: {exc}"
                if op == "erase" and "erase again to complete it" in str(exc):
                    # its control records fit, a later batch did not: announced, so it cannot be undone;
                    # the message says so, and running it again completes it
                    assert_clear(exc, "disk is full", "interrupted after its control records")
                    os.unlink(filler)
                    count(SUITE, "disk full under the vault: erasure half done, completed by erasing again")
                    v.lock()
                    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as again:
                        try:
                            again.erase([bytes.fromhex(template["target"])])
                        except VaultError as exc2:
                            assert "already erased" in str(exc2), exc2
                    verify_clean(template, path, str(tmp_path / f"check{keep}"))
                    mounts.unmount_all()
                    continue
                assert_clear(exc, "disk is full", "was not written")
                assert exc.file and exc.file in str(exc), f"the message does not name the file: {exc}"
                after = files_of(path)
                assert after == before, (f"{op} with {keep} free pages failed but changed the vault: "
                                         f"{sorted(set(after.items()) ^ set(before.items()))[:4]}")
                os.unlink(filler)
                OPS[op](v, template, grants)  # the space is back: the same operation succeeds
                count(SUITE, "disk full under the vault: failed cleanly, then succeeded")
            else:
                os.unlink(filler)
                count(SUITE, "disk full under the vault: enough space left, succeeded")
        verify_clean(template, path, str(tmp_path / f"check{keep}"))
        with Vault.open(path, Unlock.passphrase(PASSPHRASE) if op != "change passphrase" else
                        Unlock.recovery(template["phrase"]), home=home) as v:
            v.append([NewRecord(type="message", text="the device still writes")])
        mounts.unmount_all()
    assert failed, f"{op} never ran out of space; the test proves nothing"


@pytest.mark.regression
def test_an_erasure_whose_control_batch_does_not_fit_changes_nothing(template, mounts, tmp_path, monkeypatch):
    """Found by the long run (12 free pages): the erasure's new key files and segments fit, its first
    control batch did not.  The new files stayed behind, never announced, and this installation had
    already switched to its new key and forgotten the old one, leaving an active device nobody held.
    Here the disk fills up exactly when the installation switches keys."""
    from camillo.ops import erasure

    disk = mounts.tmpfs("4m")
    path, home = place(template, disk, home_in=str(tmp_path / "h"))
    real_become = erasure.switch_key
    fillers = []

    def become_then_fill(*args, **kwargs):
        out = real_become(*args, **kwargs)
        fillers.append(fill(disk, 0))
        return out

    monkeypatch.setattr(erasure, "switch_key", become_then_fill)
    target = bytes.fromhex(template["target"])
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as v:
        writer = v.writer_id
        before = files_of(path)
        with pytest.raises(StorageError) as info:
            v.erase([target])
        assert_clear(info.value, "disk is full")
        assert fillers, "the disk never filled up"
        os.unlink(fillers[0])
        assert files_of(path) == before, "the failed erasure left files behind"
    monkeypatch.setattr(erasure, "switch_key", real_become)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as v:
        assert v.session.actor is not None and v.writer_id == writer, "the installation lost its device key"
        v.erase([target])
    verify_clean(template, path, str(tmp_path))
    count(SUITE, "disk full under the vault: erasure's control batch")


def test_a_full_local_state_disk_changes_nothing(template, mounts, tmp_path):
    """The vault's disk has room but this installation's local state (its seq counters) has none:
    nothing may be written to the vault before the counter is durable."""
    local = mounts.tmpfs("1m")
    path, home = place(template, str(tmp_path / "vault"), home_in=local)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as v:
        # The device state's next save overwrites the older of its two copies in place, which needs no
        # new space; here that copy is missing (as for the first save after the one-file layout), so
        # the save has to make it.
        store = v.session.device_state_store
        store.load()
        older = store.paths[(store._writes + 1) % 2]
        if os.path.exists(older):
            os.unlink(older)
        filler = fill(local, 0)
        before = files_of(path)
        with pytest.raises(StorageError) as info:
            v.append([NewRecord(type="message", text="not yet")])
        assert not os.path.exists(older), "the copy that could not be written was left behind"
        assert_clear(info.value, "local state is full", "free some space")
        assert files_of(path) == before, "the vault changed although the counter could not be saved"
        os.unlink(filler)
        rid = v.append([NewRecord(type="message", text="now")]).written[0]
    verify_clean(template, path, str(tmp_path), {rid.hex(): "now"})
    count(SUITE, "disk full under the local state: append")


def test_a_new_installation_on_a_full_local_disk_changes_nothing(template, mounts, tmp_path):
    local = mounts.tmpfs("1m")
    path, _home = place(template, str(tmp_path / "vault"))
    filler = fill(local, 0)
    before = files_of(path)
    with pytest.raises(StorageError) as info:
        Vault.open(path, Unlock.passphrase(PASSPHRASE), home=os.path.join(local, "new-home"), device_name="gamma")
    assert_clear(info.value, "local state", "free some space")
    assert files_of(path) == before, "registering a device changed the vault although its key could not be kept"
    os.unlink(filler)
    Vault.open(path, Unlock.passphrase(PASSPHRASE), home=os.path.join(local, "new-home"), device_name="gamma").lock()
    verify_clean(template, path, str(tmp_path))
    count(SUITE, "disk full under the local state: registering a new installation")


# ---------------------------------------------------------------------------------------------- read-only


READ_ONLY_OPS = {**OPS, "forget a fact": lambda v, t, tmp: v.forget(key="user/city"),
                 "reissue the recovery phrase": lambda v, t, tmp: v.reissue_recovery_phrase()}


@pytest.mark.parametrize("how", ["tmpfs remounted read-only", "read-only bind mount"])
def test_a_read_only_vault_folder(how, template, mounts, tmp_path):
    if how == "tmpfs remounted read-only":
        disk = mounts.tmpfs("4m")
        path, home = place(template, disk, home_in=str(tmp_path / "h"))
        mounts.read_only(disk)
    else:
        source, home = place(template, str(tmp_path / "src"), home_in=str(tmp_path / "h"))
        path = os.path.join(mounts.bind_read_only(os.path.dirname(source)), "v")
    before, home_before = files_of(path), files_of(home)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home) as v:
        assert v.read_only
        assert {r.text for r in v.timeline()} >= set(template["records"].values())
        assert v.sync_status()[0] == "up to date"
        for name, op in READ_ONLY_OPS.items():
            with pytest.raises(ReadOnlyVault) as info:
                op(v, template, str(tmp_path))
            assert_clear(info.value, path, "read-only", "make the folder writable")
            count(SUITE, f"read-only folder ({how}): refused")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "new-home"), device_name="new") as v:
        assert v.read_only and v.session.actor is None  # a new installation registers nothing it cannot write
        assert {r.text for r in v.timeline()} >= set(template["records"].values())
    assert files_of(path) == before
    home_after = files_of(home)
    changed = {k for k in set(home_before) | set(home_after) if home_before.get(k) != home_after.get(k)}
    # only what this device has seen (spec §17.5: a later rollback is noticed), never keys, cache or registration
    assert all(k.endswith(("/state.bin", "/state-1.bin", "/generation.cbor")) for k in changed), \
        f"a read-only session changed this installation's local state: {sorted(changed)}"
    cli = subprocess.run([sys.executable, "-m", "camillo", "verify", path], capture_output=True, text=True,
                         env=dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=home), timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    cli = subprocess.run([sys.executable, "-m", "camillo", "add", path], input='{"type":"message","text":"x"}',
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=home))
    assert cli.returncode == ReadOnlyVault.exit_code and "make the folder writable" in cli.stderr + cli.stdout, \
        (cli.returncode, cli.stdout, cli.stderr)
    count(SUITE, f"read-only folder ({how}): read, verify, CLI refusal")


# ---------------------------------------------------------------------------------------------- keychain


KEYCHAIN_SCRIPT = textwrap.dedent('''
    import hashlib, json, os, sys
    from camillo import NewRecord, Unlock, Vault
    from camillo.errors import VaultError
    phase, path = sys.argv[1], sys.argv[2]
    def files():
        out = {}
        for d, _, fs in os.walk(path):
            for f in fs:
                out[os.path.relpath(os.path.join(d, f), path)] = hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
        return out
    out = {}
    if phase == "create":
        v, out["phrase"] = Vault.create(path, "correct horse battery staple", device_name="kc")
        with v:
            out["keystore"] = v.session.local.load_installation().keystore
            out["writer"] = v.writer_id.hex()
            out["record"] = v.append([NewRecord(type="message", text="kept in the vault")]).written[0].hex()
    elif phase == "lock":
        import secretstorage
        c = secretstorage.get_default_collection(secretstorage.dbus_init())
        c.lock()
        out["locked"] = c.is_locked()
    else:
        before = files()
        try:
            with Vault.open(path, Unlock.device()) as v:
                out["device"] = "opened as " + v.writer_id.hex()
                v.append([NewRecord(type="message", text="written with the device key")])
        except VaultError as exc:
            out["device"] = type(exc).__name__ + ": " + str(exc)
        if phase == "without":
            with Vault.open(path, Unlock.passphrase("correct horse battery staple")) as v:
                out["read"] = sorted(r.text for r in v.timeline())
                out["actor"] = v.writer_id.hex() if v.writer_id else None
                try:
                    v.append([NewRecord(type="message", text="not while the keychain is away")])
                    out["append"] = "written"
                except VaultError as exc:
                    out["append"] = type(exc).__name__ + ": " + str(exc)
            out["unchanged"] = files() == before
            with Vault.open(path, Unlock.recovery(sys.argv[3]), home=path + "-fresh", register=False) as v:
                out["revoked"] = sorted(d.name for d in v.devices() if d.revoked)
    print(json.dumps(out))
''')


class Session:
    """Runs the script with a private D-Bus session and gnome-keyring, or without any session."""

    def __init__(self, tmp: str) -> None:
        for tool in ("dbus-run-session", "gnome-keyring-daemon"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} is not installed: no Secret Service to test against")
        self.tmp = tmp
        self.script = os.path.join(tmp, "keychain_script.py")
        with open(self.script, "w") as fh:
            fh.write(KEYCHAIN_SCRIPT)
        self.env = dict(os.environ, CAMILLO_HOME=os.path.join(tmp, "home"), CAMILLO_INSECURE_TEST_KDF="1",
                        XDG_DATA_HOME=os.path.join(tmp, "xdg", "data"), XDG_CONFIG_HOME=os.path.join(tmp, "xdg", "cfg"),
                        XDG_RUNTIME_DIR=os.path.join(tmp, "xdg", "run"))
        self.env.pop("CAMILLO_KEYCHAIN", None)  # auto: the OS keychain when there is one
        for d in ("data", "cfg", "run"):
            os.makedirs(os.path.join(tmp, "xdg", d), mode=0o700)

    def run(self, *phases: tuple[str, ...], keyring: bool = True) -> list[dict]:
        py = " ; ".join(shlex.join([sys.executable, self.script, *p]) for p in phases)
        if keyring:
            cmd = ["dbus-run-session", "--", "bash", "-c",
                   f"echo -n unlock-me | gnome-keyring-daemon --unlock --components=secrets >/dev/null; {py}"]
            env = self.env
        else:
            cmd = ["bash", "-c", py]
            env = {k: v for k, v in self.env.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_a_missing_keychain(tmp_path):
    s = Session(str(tmp_path))
    path = str(tmp_path / "v")
    (created,) = s.run(("create", path))
    assert created["keystore"] == "keychain", created
    (out,) = s.run(("without", path, created["phrase"]), keyring=False)
    assert out["device"].startswith("KeychainError"), out
    assert "keychain" in out["device"].lower() and ("start" in out["device"] or "unlock" in out["device"]), out
    assert out["read"] == ["kept in the vault"], out  # the passphrase still reads everything
    assert out["actor"] is None and out["append"].startswith("KeychainError"), out
    assert "open the vault again" in out["append"], out
    assert out["unchanged"], "a passphrase session without the keychain changed the vault"
    assert out["revoked"] == [], "the device was retired because its keychain was away"
    (back,) = s.run(("with", path))  # the keychain is back: the same device writes again
    assert back["device"] == "opened as " + created["writer"], back
    count(SUITE, "keychain missing (no D-Bus session)")


def test_a_locked_keychain(tmp_path):
    s = Session(str(tmp_path))
    path = str(tmp_path / "v")
    (created,) = s.run(("create", path))
    lock, out = s.run(("lock", path), ("without", path, created["phrase"]))
    assert lock["locked"], lock
    assert out["device"].startswith("KeychainError") and "locked" in out["device"], out
    assert "unlock it" in out["device"], out
    assert out["read"] == ["kept in the vault"] and out["append"].startswith("KeychainError"), out
    assert out["unchanged"] and out["revoked"] == [], out
    (back,) = s.run(("with", path))
    assert back["device"] == "opened as " + created["writer"], back
    count(SUITE, "keychain locked")


# ---------------------------------------------------------------------------------------------- fixed bug


@pytest.mark.regression
def test_a_lost_device_key_keeps_the_passphrase_working(tmp_path):
    """The installation that created the vault loses its locally sealed device key (a deleted or
    damaged device-key.bin; the same happens when the OS keychain loses the entry) and opens with the
    passphrase: it certifies a new key and retires the old one.  Every installation must still be
    able to open the vault with the passphrase and the recovery phrase.  Re-certification used to
    retire the lost key with a plain REVOKE although that key had signed every slot of the current
    generation (it created the vault), so none of them counted any more (spec §10.3); now those slots
    are re-issued under the new key before the REVOKE and the originals deleted after it (§12.4)."""
    path = str(tmp_path / "v")
    vault, phrase = Vault.create(path, PASSPHRASE, device_name="first", home=str(tmp_path / "h1"))
    vault.lock()
    for f in files_of(str(tmp_path / "h1")):
        if f.endswith("device-key.bin"):
            os.unlink(os.path.join(tmp_path, "h1", f))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h1")) as v:
        assert [d.name for d in v.devices() if d.revoked] == ["first"]
        v.append([NewRecord(type="message", role="user", text="written by the new key")])
    for how, unlock in (("passphrase", Unlock.passphrase(PASSPHRASE)), ("recovery phrase", Unlock.recovery(phrase))):
        try:
            with Vault.open(path, unlock, home=str(tmp_path / "h2"), register=False, cache=False) as v:
                assert [(p.kind, p.file) for p in v.problems(full=True)] == []
                assert "written by the new key" in {r.text for r in v.timeline()}
        except WrongCredential as exc:
            raise AssertionError(f"the {how} no longer opens the vault: {exc}") from None
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h1")) as v:  # it keeps its new key
        assert v.session.actor is not None and v.writer_id == v.session.local.load_installation().writer_id
        assert [d.name for d in v.devices() if d.revoked] == ["first"]
    count(SUITE, "lost device key: re-certification")
