"""Attachments in the format (spec §9.5): files stored encrypted in chunks, read back exactly with
bounded memory, deduplicated within a compartment epoch, named and refused when damaged or missing,
destroyed by erasure (the reach report counts them), carried by pack, unpack and merge, and scoped by
grants like the record that names them."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from camillo import AccessDenied, DamagedFile, NewRecord, Unlock, UsageError, Vault
from camillo.attachments import CHUNK_SIZE
from camillo.log import SYNC_GRACE_SECONDS
from camillo.transport import merge_into, pack_vault, unpack_vault

from .helpers import switch_home

PASSPHRASE = "correct horse battery staple"


def chunk_files(path: str) -> set[str]:
    return set(glob.glob(os.path.join(path, "blobs", "*", "*.blob")))


def write_random(path: str, size: int) -> bytes:
    data = os.urandom(size)
    with open(path, "wb") as fh:
        fh.write(data)
    return data


def test_a_file_comes_back_exactly_and_shows_its_name(new_vault, tmp_path):
    path, vault, _ = new_vault
    data = write_random(str(tmp_path / "scan.pdf"), 2 * CHUNK_SIZE + 12345)
    msg = vault.append([NewRecord(type="message", text="here is the lease", role="user", conversation="c")]).written[0]
    rid = vault.attach(str(tmp_path / "scan.pdf"), of=msg).written[0]
    assert len(chunk_files(path)) == 3
    v = vault.record(rid)
    assert (v.type, v.text, v.value["media_type"], v.value["size"], v.value["of"]) == (
        "attachment", "scan.pdf", "application/pdf", len(data), msg.hex())
    out = str(tmp_path / "back.pdf")
    f = vault.save_attachment(rid, out)
    assert open(out, "rb").read() == data and f.sha256 == v.value["sha256"]
    with pytest.raises(UsageError, match="exists"):
        vault.save_attachment(rid, out)
    # no plaintext of the file in any vault file
    for name in glob.glob(os.path.join(path, "**", "*"), recursive=True):
        if os.path.isfile(name):
            assert data[1000:1064] not in open(name, "rb").read()


def test_the_same_file_is_stored_once_per_compartment_epoch(new_vault, tmp_path):
    path, vault, _ = new_vault
    write_random(str(tmp_path / "a.bin"), CHUNK_SIZE + 10)
    vault.attach(str(tmp_path / "a.bin"))
    before = chunk_files(path)
    vault.attach(str(tmp_path / "a.bin"), name="copy.bin")
    assert chunk_files(path) == before
    vault.attach(str(tmp_path / "a.bin"), compartment="work")  # another compartment: its own copy
    assert len(chunk_files(path)) == 2 * len(before)


def test_a_damaged_or_missing_chunk_is_named_and_leaves_nothing(new_vault, tmp_path):
    path, vault, _ = new_vault
    write_random(str(tmp_path / "a.bin"), CHUNK_SIZE + 10)
    rid = vault.attach(str(tmp_path / "a.bin")).written[0]
    victim = sorted(chunk_files(path))[0]
    good = open(victim, "rb").read()
    with open(victim, "r+b") as fh:
        fh.seek(200)
        fh.write(bytes([good[200] ^ 1]))
    out = str(tmp_path / "out.bin")
    with pytest.raises(DamagedFile, match="damaged or tampered") as exc:
        vault.save_attachment(rid, out)
    assert exc.value.file.endswith(os.path.basename(victim))
    assert not os.path.exists(out) and not glob.glob(str(tmp_path / "out.bin*"))
    os.unlink(victim)
    with pytest.raises(DamagedFile, match="has not arrived"):
        vault.save_attachment(rid, out)
    assert not os.path.exists(out)


def test_erasure_destroys_the_files_and_counts_them(new_vault, tmp_path):
    path, vault, _ = new_vault
    write_random(str(tmp_path / "x-ray.png"), CHUNK_SIZE + 10)
    write_random(str(tmp_path / "kept.png"), 100)
    msg = vault.append([NewRecord(type="message", text="my x-ray", role="user", conversation="c")]).written[0]
    xray = vault.attach(str(tmp_path / "x-ray.png"), of=msg).written[0]
    xray_chunks = chunk_files(path)
    shared = vault.attach(str(tmp_path / "kept.png")).written[0]
    vault.attach(str(tmp_path / "kept.png"), name="again.png")  # names the same chunk
    report = vault.erase([msg])  # the message's attachment goes with it
    assert xray in {bytes.fromhex(r) for r in report.records}
    assert report.attachment_chunks_deleted == len(xray_chunks) == 2
    assert not (xray_chunks & chunk_files(path))
    assert any("chunk file" in line for line in report.lines())
    report = vault.erase([shared])  # its chunk is still named by the other record: kept
    assert report.attachment_chunks_deleted == 0 and len(chunk_files(path)) == 1
    left = [r.id for r in vault.timeline() if r.type == "attachment"]
    assert len(left) == 1
    vault.save_attachment(left[0], str(tmp_path / "again.png"))


def test_pack_unpack_and_merge_carry_attachments(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    data = write_random(str(tmp_path / "a.bin"), CHUNK_SIZE + 5)
    copy = str(tmp_path / "copy")
    vault.lock()
    shutil.copytree(path, copy)
    with Vault.open(copy, Unlock.passphrase(PASSPHRASE)) as other:  # the other copy attaches
        rid = other.attach(str(tmp_path / "a.bin")).written[0]
    merge_into(path, copy)
    pack_vault(path, str(tmp_path / "v.vmem"))
    unpack_vault(str(tmp_path / "v.vmem"), str(tmp_path / "unpacked"))
    for where in (path, str(tmp_path / "v.vmem"), str(tmp_path / "unpacked")):
        with Vault.open(where, Unlock.passphrase(PASSPHRASE), register=False) as v:
            out = str(tmp_path / f"out-{len(os.listdir(tmp_path))}")
            v.save_attachment(rid, out)
            assert open(out, "rb").read() == data


def test_grants_see_attachments_as_they_see_their_records(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    write_random(str(tmp_path / "w.bin"), 5000)
    work = vault.attach(str(tmp_path / "w.bin"), compartment="work").written[0]
    personal = vault.attach(str(tmp_path / "w.bin"), compartment="personal").written[0]
    grants = {}
    for level in ("read", "append"):
        grants[level] = str(tmp_path / f"{level}.grant")
        vault.create_grant(f"agent-{level}", {"work": level}, grants[level])
    vault.lock()
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(grants["read"])) as agent:
        agent.save_attachment(work, str(tmp_path / "ok.bin"))
        with pytest.raises(AccessDenied):
            agent.save_attachment(personal, str(tmp_path / "no.bin"))
    assert not os.path.exists(tmp_path / "no.bin")
    switch_home(monkeypatch, tmp_path / "appender")
    with Vault.open(path, Unlock.grant(grants["append"])) as appender:
        added = appender.attach(str(tmp_path / "w.bin"), compartment="work").written[0]
        with pytest.raises(AccessDenied):
            appender.save_attachment(added, str(tmp_path / "no.bin"))
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.save_attachment(added, str(tmp_path / "appended.bin"))
        assert v.record(added).claimed_class is not None and v.problems() == []


def test_compaction_deletes_orphan_chunks_only_after_the_grace_period(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    write_random(str(tmp_path / "a.bin"), 100)
    vault.attach(str(tmp_path / "a.bin"))
    named = chunk_files(path)
    orphan = os.path.join(path, "blobs", "ab", "ab" + "0" * 62 + ".blob")
    os.makedirs(os.path.dirname(orphan), exist_ok=True)  # (a chunk of a.bin lands in blobs/ab/ once in 256 runs)
    with open(orphan, "wb") as fh:
        fh.write(b"\0" * 4096)  # chunks of an attachment whose record has not arrived (or never will)
    vault.refresh()
    vault.compact()
    assert os.path.exists(orphan)  # within the grace period: another device's attachment may be coming
    old = time.time() - SYNC_GRACE_SECONDS - 60
    os.utime(orphan, (old, old))
    vault.refresh()
    vault.compact()
    assert not os.path.exists(orphan) and chunk_files(path) == named


def test_a_large_file_round_trips_with_bounded_memory(tmp_path):
    """50 MB in and out of the vault through the CLI, each process's peak RSS under 100 MB above that
    of the same process doing nothing with a file."""
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=str(tmp_path / "home"))
    vault = str(tmp_path / "v")
    big = str(tmp_path / "big.bin")
    with open(big, "wb") as fh:
        for _ in range(50):
            fh.write(os.urandom(1 << 20))
    probe = ("import resource, sys; from camillo.cli import main; rc = main(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")

    def run(*args: str) -> tuple[str, int]:
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout, int(proc.stderr.strip().splitlines()[-1])

    run("init", vault)
    _, baseline = run("log", vault)
    out, attach_rss = run("attach", vault, big)
    rid = json.loads(out)["id"]
    _, read_rss = run("attachment", vault, rid, "--out", str(tmp_path / "back.bin"))
    assert attach_rss - baseline < 100 * 1024 and read_rss - baseline < 100 * 1024, (baseline, attach_rss, read_rss)
    assert subprocess.run(["cmp", big, str(tmp_path / "back.bin")]).returncode == 0
    log = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "camillo.cli", "log", vault, "--json"], capture_output=True, text=True,
        env=env, timeout=120).stdout.splitlines()]
    shown = next(r for r in log if r["id"] == rid)["value"]
    assert shown["name"] == "big.bin" and shown["size"] == 50 << 20 and len(shown["sha256"]) == 64


def test_a_chunk_file_is_exactly_what_spec_9_5_says(new_vault, tmp_path):
    """An independent derivation from the spec's text (cryptography and PyNaCl only): the chunk key
    and salt from the epoch secret, the sealed body of §6.1, the padded size, the name."""
    import hashlib

    import cbor2
    import nacl.bindings
    from camillo.primitives import padme
    from camillo.session.writer import sealing_key
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

    path, vault, _ = new_vault
    data = b"a small file, one chunk"
    (tmp_path / "f.txt").write_bytes(data)
    cid = vault.compartment_id("personal")
    eid, _ = sealing_key(vault.session, cid)
    es = vault.session.keyring.secret((cid, eid))
    rid = vault.attach(str(tmp_path / "f.txt")).written[0]
    body = cbor2.loads(vault.session.materialized.raw_record(rid))[12]
    [[name_hash, key, length]] = body[1]

    def label(text: str, *parts: bytes) -> bytes:
        return text.encode() + b"\0" + b"".join(parts)

    vid = vault.vault_id
    expected_key = HKDF(hashes.SHA256(), 32, None, label("vmem/v1/attachment/chunk-key", vid, cid, eid,
                                                         hashlib.sha256(data).digest())).derive(es)
    salt = HKDF(hashes.SHA256(), 24, None, label("vmem/v1/attachment/chunk-salt", vid)).derive(expected_key)
    okm = HKDFExpand(hashes.SHA256(), 88, label("vmem/v1/attachment/chunk", salt, vid)).derive(expected_key)
    header = b"VMEMBLB1" + b"\x00\x01" + b"\x00\x00"
    size = max(4096, padme(68 + 4 + len(data) + 16))
    plaintext = len(data).to_bytes(4, "big") + data
    plaintext += bytes(size - len(header) - 24 - 32 - 16 - len(plaintext))
    prefix = header + salt + okm[56:88]
    expected = prefix + nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, prefix, okm[32:56],
                                                                                  okm[:32])
    h = hashlib.sha256(expected).hexdigest()
    assert (key, length, name_hash.hex()) == (expected_key, len(data), h)
    assert open(os.path.join(path, "blobs", h[:2], f"{h}.blob"), "rb").read() == expected
