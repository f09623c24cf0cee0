"""The ``camillo`` command line as a user runs it: separate processes, real files, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PASSPHRASE = "correct horse battery staple"


def run(*args: str, stdin: str | None = None, env: dict | None = None, check: int | None = 0):
    full_env = dict(os.environ)
    full_env["CAMILLO_PASSPHRASE"] = PASSPHRASE
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "camillo.cli", *args], input=stdin, capture_output=True, text=True, env=full_env,
        timeout=120,
    )
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def vault_dir(tmp_path):
    path = str(tmp_path / "v")
    proc = run("init", path)
    words = proc.stdout.split()
    assert len(words) == 24
    assert "shown only this once" in proc.stderr
    return path, " ".join(words)


def test_round_trip(vault_dir, tmp_path):
    path, _ = vault_dir
    lines = [
        {"type": "conversation", "conversation": "c1", "title": "Trip"},
        {"type": "message", "conversation": "c1", "role": "user", "text": "I live in Lisbon"},
        {"type": "fact", "key": "user/home_city", "value": "Lisbon", "class": "user"},
    ]
    out = jsonl(run("add", path, stdin="\n".join(json.dumps(x) for x in lines)).stdout)
    assert len(out) == 3 and all(len(x["id"]) == 64 for x in out)
    run("add", path, "--compartment", "work", stdin='{"type":"message","text":"at work"}')
    log = jsonl(run("log", path, "--json").stdout)
    by_text = {r.get("text"): r for r in log}
    assert {"id", "type", "kind", "compartment", "class", "writer", "ts"} <= set(by_text["I live in Lisbon"])
    assert by_text["Lisbon"]["key"] == "user/home_city" and by_text["Lisbon"]["value"] == "Lisbon"
    assert by_text["at work"]["compartment"] == "work"
    assert {r["id"] for r in log} >= {x["id"] for x in out}
    verify = json.loads(run("verify", path, "--json").stdout)
    assert verify["ok"] is True and verify["problems"] == []
    vmem = str(tmp_path / "v.vmem")
    run("pack", path, vmem)
    run("pack", path, str(tmp_path / "again.vmem"))
    assert open(vmem, "rb").read() == open(tmp_path / "again.vmem", "rb").read()
    run("unpack", vmem, str(tmp_path / "copy"))
    log2 = jsonl(run("log", str(tmp_path / "copy"), "--json").stdout)
    assert [r["id"] for r in log2] == [r["id"] for r in log]
    log3 = jsonl(run("log", vmem, "--json").stdout)
    assert [r["id"] for r in log3] == [r["id"] for r in log]
    text = run("log", path).stdout
    assert "user: I live in Lisbon" in text and "[user]" in text


def test_credentials_and_exit_codes(vault_dir, tmp_path):
    path, phrase = vault_dir
    bad = run("log", path, env={"CAMILLO_PASSPHRASE": "nope"}, check=3)
    assert "wrong passphrase for vault" in bad.stderr
    run("log", path, "--recovery", env={"CAMILLO_RECOVERY_PHRASE": phrase})
    wrong = run("log", path, "--recovery", env={"CAMILLO_RECOVERY_PHRASE": "abandon " * 23 + "zoo"}, check=3)
    assert "checksum" in wrong.stderr or "wrong recovery phrase" in wrong.stderr
    run("passwd", path, env={"CAMILLO_NEW_PASSPHRASE": "brand new"})
    run("log", path, check=3)
    run("log", path, env={"CAMILLO_PASSPHRASE": "brand new"})
    usage = run("add", path, stdin="not json", env={"CAMILLO_PASSPHRASE": "brand new"}, check=2)
    assert "line 1 is not JSON" in usage.stderr
    usage = run("add", path, stdin='{"type":"fact","value":1}', env={"CAMILLO_PASSPHRASE": "brand new"}, check=2)
    assert "needs a \"key\"" in usage.stderr
    run("log", str(tmp_path / "nowhere"), check=4)
    run("frobnicate", check=2)


def test_no_terminal_and_no_passphrase_is_a_clear_error(vault_dir):
    path, _ = vault_dir
    env = dict(os.environ)
    env.pop("CAMILLO_PASSPHRASE", None)
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", "log", path], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2 and "no terminal to ask on" in proc.stderr


def test_verify_names_each_problem(vault_dir):
    path, _ = vault_dir
    run("add", path, stdin='{"type":"message","text":"x"}')
    seg = None
    for dirpath, _d, files in os.walk(os.path.join(path, "segments")):
        for f in files:
            seg = os.path.join(dirpath, f)
    data = bytearray(open(seg, "rb").read())
    data[-1] ^= 1
    open(seg, "wb").write(bytes(data))
    proc = run("verify", path, "--json", check=1)
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    rel = os.path.relpath(seg, path)
    assert any(p["file"] == rel and p["kind"] == "damaged" for p in report["problems"])
    assert all({"kind", "file", "message"} <= set(p) for p in report["problems"])


def test_info_shows_only_host_visible_fields(vault_dir):
    path, _ = vault_dir
    info = json.loads(run("info", path, "--json").stdout)
    kinds = {f["kind"] for f in info["files"]}
    assert kinds == {"descriptor", "slot", "envelope", "segment"}
    for f in info["files"]:
        allowed = {"name", "kind", "size", "vault_id", "format_version", "suite", "credential_type", "slot_id",
                   "generation", "kdf", "tag", "compartment_id", "epoch_id"}
        assert set(f) <= allowed, f
    assert sum(1 for f in info["files"] if f.get("credential_type") == "passphrase") == 1


# ---------------------------------------------------------------------------------------------- the parser, in process

COMMANDS = ["init", "add", "log", "verify", "pack", "unpack", "passwd", "info",
            "facts", "fact", "conflicts", "resolve", "inbox", "confirm", "reject", "forget", "search", "attach",
            "attachment", "merge",
            "grant", "grants", "devices", "revoke", "compartments", "policy", "enroll", "recipient", "erase",
            "compact", "recovery",
            "mcp", "import", "export"]


def test_every_command_is_registered_once_in_the_order_help_lists_them():
    import argparse

    from camillo.cli import build_parser

    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == COMMANDS
    assert all(callable(p.get_default("func")) for name, p in sub.choices.items() if name not in ("enroll", "recipient"))


def test_emit_prints_json_lines_or_text_lines(capsys):
    import argparse

    from camillo.cli.common import emit, emit_one

    items = [{"b": 1, "a": "é"}, {"b": 2, "a": "x"}]
    emit(argparse.Namespace(json=True), items, lambda d: d, lambda d: "unused")
    assert capsys.readouterr().out == '{"a": "é", "b": 1}\n{"a": "x", "b": 2}\n'  # sorted keys, UTF-8 as is
    emit(argparse.Namespace(json=False), items, lambda d: d, lambda d: f"{d['a']} {d['b']}")
    assert capsys.readouterr().out == "é 1\nx 2\n"
    emit(argparse.Namespace(), items, lambda d: d, lambda d: [f"{d['a']}", "  more"])  # no --json option at all
    assert capsys.readouterr().out == "é\n  more\nx\n  more\n"
    emit_one(argparse.Namespace(json=False), items, lambda d: d, lambda d: [])
    assert capsys.readouterr().out == ""
