"""Bad input to ``camillo`` gets exit 2 and one sentence naming the line or the path and what to do,
never "internal error" and never "damaged or unsupported vault" (issue 15, item 5): ``add`` with
values nested too deep, lone surrogates, invalid UTF-8, integers and times outside 64 bits, too many
``pred`` or ``sources``; ``pack`` over an existing file or into a vault folder; ``grant --out`` into
a missing folder or a vault folder.  A refused ``add`` writes nothing: the vault's files are
compared before and after.

Most cases run ``camillo.cli.main`` in this process (fast); a few run a real ``camillo`` process,
where standard input is the operating system's.  Runs on pytest's main thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from camillo import Unlock, Vault

from .helpers import cli, snapshot

PASSPHRASE = "correct horse battery staple"
ID = "ab" * 32


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``camillo ARGS`` as its own process, standard input as bytes."""
    env = {**os.environ, "CAMILLO_PASSPHRASE": PASSPHRASE}
    return subprocess.run([sys.executable, "-m", "camillo.cli", *args], input=stdin, capture_output=True, env=env,
                          timeout=120)


def refused(code: int, err: str) -> str:
    assert code == 2, f"exit {code}: {err}"
    assert "internal error" not in err and "Traceback" not in err, err
    assert "damaged" not in err and "unsupported" not in err, err
    assert err.startswith("camillo: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def vault(tmp_path, monkeypatch):
    """A new vault (this installation is its device); the passphrase in the environment."""
    monkeypatch.setenv("CAMILLO_PASSPHRASE", PASSPHRASE)
    path = str(tmp_path / "vault")
    Vault.create(path, PASSPHRASE, device_name="test laptop")[0].lock()
    return path


def line(**record: object) -> bytes:
    return json.dumps(record).encode()


def deep(levels: int) -> bytes:
    return b'{"type": "message", "value": ' + b"[" * levels + b"]" * levels + b"}"


ISSUE_CASES = {
    # exit 70 "internal error" before
    "nested 500 levels": (deep(500), "more than 63 levels deep"),
    "nested 100 000 levels": (deep(100_000), "too deeply to read"),
    "lone surrogate in text": (b'{"type": "message", "text": "\\ud800"}', "lone surrogate"),
    "lone surrogate in a key": (b'{"type": "fact", "key": "user/\\udfff", "value": 1}', "lone surrogate"),
    "lone surrogate as a name in a value": (b'{"type": "message", "value": {"\\ud800": 1}}', "lone surrogate"),
    "invalid UTF-8": (b'{"type": "message", "text": "\xff\xfe"}', "not UTF-8 text"),
    "a surrogate encoded as UTF-8 bytes": (b'{"type": "message", "text": "\xed\xa0\x80"}', "not UTF-8 text"),
    "a number of 5000 digits": (b'{"type": "message", "value": ' + b"7" * 5000 + b"}", "digits long"),
    # exit 4 "damaged or unsupported vault" before
    "ts 2^70": (line(type="message", text="x", ts=2**70), "\"ts\" is 1180591620717411303424"),
    "ts 2^64": (line(type="message", text="x", ts=2**64), "0 to 2^64-1"),
    "integer 2^100": (line(type="message", value=2**100), "-2^64 to 2^64-1"),
    "integer -2^100": (line(type="message", value={"n": [-(2**100)]}), "-2^64 to 2^64-1"),
    "fact value 2^64": (line(type="fact", key="user/n", value=2**64), "-2^64 to 2^64-1"),
    "meta integer 2^64": (line(type="message", text="x", meta={"n": 2**64}), "\"meta\" 'n'"),
    "nested 65 levels": (deep(65), "more than 63 levels deep"),
    "nested 64 levels": (deep(64), "more than 63 levels deep"),
    "nested 490 levels": (deep(490), "more than 63 levels deep"),
    "4097 pred": (line(type="fact", key="user/a", value=1, pred=[f"{i:064x}" for i in range(4097)]),
                  "\"pred\" lists 4097 record ids; a VMEM record holds at most 4096"),
    "4097 sources": (line(type="message", text="x", sources=[f"{i:064x}" for i in range(4097)]),
                     "\"sources\" lists 4097 record ids"),
    # refused before, but without naming the line
    "unknown type": (line(type="note", text="x"), "unknown record type 'note'"),
    "fact without key": (line(type="fact", value=1), "needs a \"key\""),
    "record over 4 MiB": (line(type="message", text="x" * (4 * 1024 * 1024)), "limited to 4194304 bytes"),
    "key over 512 bytes": (line(type="fact", key="user/" + "k" * 600, value=1), "longer than 512 bytes"),
    "type over 128 bytes": (line(type="com.example/" + "t" * 200, value=1), "longer than 128 bytes"),
    "class as a list": (line(type="message", text="x", **{"class": [[1]]}), "\"class\" must be one of"),
    # found by the property test: the message quoted the line's text raw, a new line and all
    "a key that is a new line": (line(type="fact", key="\n", value=[]), "the key '\\n' must look like"),
    "a key with a bidi override": (line(type="fact", key="user/\u202eevil", value=1), "'user/\\u202eevil'"),
    "a type with a new line": (line(type="com.example/a\nb", value=1), "record type 'com.example/a\\nb' may use"),
    "an unknown type with a new line": (line(type="x\n", text="t"), "unknown record type 'x\\n'"),
}


@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_bad_add_line_is_exit_2_naming_the_line_and_nothing_is_added(vault, case):
    bad, expected = ISSUE_CASES[case]
    before = snapshot(vault)
    good = b'{"type": "message", "text": "fine"}\n'
    code, out, err = cli("add", vault, stdin=good + b"\n" + bad + b"\n" + good)
    err = refused(code, err)
    assert err.startswith("camillo: line 3") and err.rstrip().endswith("nothing was added"), err
    assert expected in err, err
    assert out == ""
    assert snapshot(vault) == before


def test_what_the_limits_allow_is_added(vault):
    """The edges of the refusals above are accepted: 63 levels in a value, ±2^64 bounds, 4096 ids,
    a surrogate pair, a byte order mark."""
    ids = [f"{i:064x}" for i in range(4096)]
    lines = [deep(63), line(type="message", value=[2**64 - 1, -(2**64)]), line(type="message", text="t", ts=2**64 - 1),
             line(type="fact", key="user/many", value=1, pred=ids, sources=ids, **{"class": "external"}),
             b'{"type": "message", "text": "\\ud83d\\ude00"}', b"\xef\xbb\xbf" + line(type="message", text="bom")]
    code, out, err = cli("add", vault, stdin=b"\n".join(lines))
    assert code == 0, err
    assert len(out.splitlines()) == len(lines)
    code, out, err = cli("log", vault, "--json")
    texts = [json.loads(x).get("text") for x in out.splitlines()]
    assert "\U0001f600" in texts and "bom" in texts


def records(vault: str) -> list[str]:
    code, out, err = cli("log", vault, "--json", "--all")
    assert code == 0, err
    return [json.loads(x)["id"] for x in out.splitlines()]


def test_session_refusals_say_nothing_was_added(vault, tmp_path):
    """What only the open vault can refuse (an unknown compartment, a grant's limits) adds nothing
    either; bad lines from a grant or into another compartment are refused by line like the owner's."""
    helper = str(tmp_path / "helper.grant")
    with Vault.open(vault, Unlock.passphrase(PASSPHRASE)) as v:
        v.create_grant("helper", {"personal": "write", "work": "write"}, helper)
    before = records(vault)
    code, _, err = cli("add", vault, "--compartment", "nope", stdin=line(type="message", text="x"))
    assert "has no compartment 'nope'" in refused(code, err) and "nothing was added" in err
    code, _, err = cli("add", vault, "--grant", helper, stdin=line(type="fact", key="user/a", value=1, **{"class": "user"}))
    assert code == 5 and "at most inferred" in err and "nothing was added" in err, err
    for extra in (["--grant", helper], ["--compartment", "work"], ["--grant", helper, "--compartment", "work"]):
        code, _, err = cli("add", vault, *extra, stdin=line(type="message", text="ok") + b"\n" + deep(500))
        assert refused(code, err).startswith("camillo: line 2: value nests"), err
    assert records(vault) == before
    code, out, err = cli("add", vault, "--grant", helper, "--compartment", "work", stdin=line(type="message", text="ok"))
    assert code == 0 and len(out.splitlines()) == 1, err
    assert len(records(vault)) == len(before) + 1


def test_a_record_above_its_sources_is_refused_by_line(vault):
    """Spec §16.3 rule 8: every reader rejects a record that claims more authority than a source (one
    the vault does not have counts as external).  ``camillo add`` refused nothing and printed its id;
    the record then vanished from every view.  Now the owner's line is refused, naming the source (an
    agent's grant is not checked: it may cite records of compartments it cannot read)."""
    code, out, err = cli("add", vault, stdin=line(type="message", text="a web page said so", role="web"))
    assert code == 0, err
    web = json.loads(out)["id"]
    before = snapshot(vault)
    for bad, why in [(line(type="fact", key="user/bank", value="Evil Bank", sources=[ID]),
                      f"claims user authority, but its source {ID[:12]} is not in this vault"),
                     (line(type="fact", key="user/bank", value="Evil Bank", sources=[web], **{"class": "observed"}),
                      f"claims observed authority, but its source {web[:12]} holds external authority"),
                     (line(type="summary", text="from the web", sources=[web]), "give \"class\": \"external\"")]:
        code, _, err = cli("add", vault, stdin=line(type="message", text="fine") + b"\n" + bad)
        assert refused(code, err).startswith("camillo: line 2: claims"), err
        assert why in err and "nothing was added" in err, err
    assert snapshot(vault) == before
    code, out, err = cli("add", vault, stdin=line(type="fact", key="user/bank", value="Evil Bank", sources=[web],
                                                   **{"class": "external"}))
    assert code == 0, err
    code, out, err = cli("fact", vault, "user/bank", "--json")
    assert code == 0 and json.loads(out)["proposed"][0]["class"] == "external", (out, err)


def test_empty_input_and_blank_lines(vault):
    code, _, err = cli("add", vault, stdin=b"\n  \n\r\n")
    assert "no records on standard input" in refused(code, err)


@pytest.mark.parametrize("data,expected", [
    (deep(500), "line 1: value nests arrays and objects more than 63 levels deep"),
    (deep(200_000), "line 1 nests arrays and objects too deeply to read"),
    (b'{"type": "message", "text": "a"}\n{"type": "message", "text": "\xc3("}', "line 2 is not UTF-8 text"),
    (b'{"type": "message", "text": "\\ud800"}', "line 1: \"text\" holds a lone surrogate (\\ud800)"),
])
def test_bad_add_in_a_real_process(vault, data, expected):
    before = snapshot(vault)
    proc = run("add", vault, stdin=data)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert expected in err and "nothing was added" in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert snapshot(vault) == before


# ---------------------------------------------------------------------------------------------- pack


def test_pack_refuses_an_existing_file_unless_forced(vault, tmp_path):
    out = str(tmp_path / "v.vmem")
    Path(out).write_bytes(b"precious")
    code, _, err = cli("pack", vault, out)
    assert "already exists" in refused(code, err) and "--force" in err and out in err
    assert Path(out).read_bytes() == b"precious"
    assert cli("add", vault, stdin=line(type="message", text="first"))[0] == 0
    code, stdout, err = cli("pack", vault, out, "--force")
    assert code == 0 and "wrote" in stdout, err
    code, out_log, err = cli("log", out, "--json")
    assert code == 0 and "first" in out_log, err


@pytest.mark.parametrize("where", ["VMEM", "v.vmem", "segments/v.vmem", "new/v.vmem", "."])
def test_pack_never_writes_inside_a_vault_folder(vault, where):
    before = snapshot(vault)
    target = os.path.normpath(os.path.join(vault, where))
    for extra in ([], ["--force"]):
        code, _, err = cli("pack", vault, target, *extra)
        assert "vault folder" in refused(code, err) and target in err, err
    assert snapshot(vault) == before
    code, _, err = cli("verify", vault)
    assert code == 0, err


def test_pack_into_another_vaults_folder_or_a_missing_folder(vault, tmp_path):
    other, _ = Vault.create(str(tmp_path / "other"), PASSPHRASE)
    other.lock()
    before = snapshot(other.location)
    code, _, err = cli("pack", vault, str(tmp_path / "other" / "v.vmem"), "--force")
    assert f"inside the vault folder {tmp_path / 'other'}" in refused(code, err)
    assert snapshot(str(tmp_path / "other")) == before
    code, _, err = cli("pack", vault, str(tmp_path / "missing" / "v.vmem"))
    assert f"the folder {tmp_path / 'missing'} does not exist" in refused(code, err)
    code, _, err = cli("pack", vault, str(tmp_path))
    assert "is a folder" in refused(code, err)
    code, _, err = cli("pack", vault, "")
    assert "no file name given" in refused(code, err)
    (tmp_path / "plain").write_text("a file")
    code, _, err = cli("pack", vault, str(tmp_path / "plain" / "v.vmem"))
    assert f"{tmp_path / 'plain'} is a file, not a folder" in refused(code, err)


# ---------------------------------------------------------------------------------------------- grant --out


def grant(vault: str, out: str) -> tuple[int, str, str]:
    return cli("grant", vault, "--agent", "bot", "--compartment", "personal", "--level", "read", "--out", out)


def test_grant_out_into_a_missing_folder_names_it_and_grants_nothing(vault, tmp_path):
    code, _, err = grant(vault, str(tmp_path / "missing" / "bot.grant"))
    assert f"the folder {tmp_path / 'missing'} does not exist" in refused(code, err)
    code, _, err = grant(vault, "")
    assert "no file name given; give one for the grant file" in refused(code, err)
    code, out, err = cli("grants", vault, "--json")
    assert code == 0 and out == "", err


def test_grant_out_never_inside_a_vault_folder(vault, tmp_path):
    """The grant file is the agent's secret; the vault folder is what the sync service sees."""
    before = snapshot(vault)
    for out in (os.path.join(vault, "bot.grant"), os.path.join(vault, "env", "bot.grant"), vault):
        code, _, err = grant(vault, out)
        assert "vault folder" in refused(code, err), err
    assert snapshot(vault) == before
    code, _, err = grant(vault, str(tmp_path))
    assert "is a folder" in refused(code, err)
    (tmp_path / "taken.grant").write_text("mine")
    code, _, err = grant(vault, str(tmp_path / "taken.grant"))
    assert "already exists" in refused(code, err)


# ---------------------------------------------------------------------------------------------- the two conversions


def test_what_add_refuses_an_importer_keeps_as_text():
    """The one JSON-to-CBOR conversion: strict for what a person or agent typed (each case refused,
    naming the limit), lenient for someone else's export (the same values kept as text, and the
    result encodes within the profile), so an export's odd tool input does not lose its message."""
    import json as _json

    from camillo import encoding
    from camillo.errors import LimitExceeded, UsageError
    from camillo.importers.safety import json_safe
    from camillo.values import json_to_cbor

    deep_value = _json.loads("[" * 100 + '"\\ud800"' + "]" * 100)
    cases = [({"n": 2**70}, {"n": str(2**70)}), ({"\ud800": 1}, {"?": 1}), ([1.5], ["1.5"]),
             ([-(2**100), 2**64 - 1], [str(-(2**100)), 2**64 - 1])]
    for given, kept in cases:
        with pytest.raises(UsageError):
            json_to_cbor(given)
        assert json_safe(given) == kept
        encoding.encode({"v": json_safe(given)})
    with pytest.raises(LimitExceeded, match="more than 63 levels deep"):
        json_to_cbor(deep_value)
    kept = json_safe(deep_value)
    encoding.encode({"v": kept})
    inner = kept
    for _ in range(63):
        inner = inner[0]
    assert inner == "[" * 37 + '"?"' + "]" * 37


def test_what_the_limits_allow_is_read_back_by_every_command(vault, tmp_path):
    """Records at the edges of what ``add`` accepts (4096 sources, cited at class external: a source
    this vault does not have counts as external, spec §16.3 rule 8) are the user's own data: every reading command,
    the inbox, confirming, both exports, verify and pack handle them (exit 0), never an internal error."""
    edge = {"a": [2**64 - 1, -(2**64), "\ud83d\ude00", "\u202eevil", "\x00"]}
    for _ in range(30):
        edge = {"e": [edge]}  # 62 levels of arrays and objects in all
    lines = [json.dumps({"type": "fact", "key": "user/edge", "value": edge}).encode(),
             json.dumps({"type": "fact", "key": "user/big", "value": 2**64 - 1, "class": "external",
                         "sources": [f"{i:064x}" for i in range(4096)], "meta": {"n": 2**64 - 1, "\x00": "\x00"},
                         "ts": 2**64 - 1}).encode(),
             json.dumps({"type": "com.example/bookmark", "value": edge, "ts": 0}).encode(),
             deep(63)]
    code, out, err = cli("add", vault, stdin=b"\n".join(lines))
    assert code == 0, err
    proposal = json.loads(out.splitlines()[1])["id"]
    commands = [["log", vault, "--json", "--all"], ["log", vault], ["facts", vault], ["facts", vault, "--json"],
                ["fact", vault, "user/edge", "--json"],
                ["fact", vault, "user/big"], ["search", vault, "edge"], ["search", vault, "key:user/big", "--json"],
                ["inbox", vault], ["inbox", vault, "--json"], ["confirm", vault, proposal], ["verify", vault],
                ["export", "pam", vault, str(tmp_path / "pam")], ["export", "portable-memory", vault, str(tmp_path / "mem")],
                ["pack", vault, str(tmp_path / "v.vmem")], ["log", str(tmp_path / "v.vmem"), "--json"]]
    for args in commands:
        code, out, err = cli(*args)
        assert code == 0 and "internal error" not in err, (args, code, err)


def test_pack_into_a_folder_that_refuses_writing_is_exit_2(vault):
    """A place the system will not write to (here /sys, which refuses even root) is the user's choice
    of path, not a damaged vault: exit 2 naming it and what to do."""
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs /sys")
    code, _, err = cli("pack", vault, "/sys/kernel/v.vmem")
    assert "cannot write /sys/kernel/v.vmem" in refused(code, err) and "choose a folder you can write to" in err


def test_grant_out_into_a_folder_that_refuses_writing_is_exit_2_and_grants_nothing(vault):
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs /sys")
    code, _, err = grant(vault, "/sys/kernel/bot.grant")
    assert "cannot write the grant file /sys/kernel/bot.grant" in refused(code, err)
    code, out, err = cli("grants", vault, "--json")
    assert code == 0 and out == "", err


# ---------------------------------------------------------------------------------------------- attachment --out


def test_attachment_out_never_inside_a_vault_folder_nor_a_missing_one(vault, tmp_path):
    """An attachment's bytes are plaintext: written into the vault folder they would travel to the
    sync service.  Refused with exit 2 naming the path, like a missing folder; nothing is written."""
    (tmp_path / "photo.png").write_bytes(b"\x89PNG not really" * 100)
    code, out, err = cli("attach", vault, str(tmp_path / "photo.png"))
    assert code == 0, err
    rid = json.loads(out.splitlines()[-1])["id"]
    before = snapshot(vault)
    for target, expected in [(os.path.join(vault, "photo.png"), "vault folder"),
                             (os.path.join(vault, "blobs", "photo.png"), "vault folder"),
                             (str(tmp_path / "missing" / "photo.png"), "does not exist"),
                             ("/sys/kernel/photo.png", "choose a folder you can write to")]:
        code, _, err = cli("attachment", vault, rid, "--out", target)
        assert expected in refused(code, err) and target.rsplit("/", 1)[0] in err, err
    assert snapshot(vault) == before
    assert not (tmp_path / "missing").exists()
    code, _, err = cli("attachment", vault, rid, "--out", str(tmp_path / "back.png"))
    assert code == 0 and (tmp_path / "back.png").read_bytes() == (tmp_path / "photo.png").read_bytes(), err


def test_add_from_a_text_stream_in_place_of_standard_input(vault, monkeypatch):
    """A caller running ``camillo.cli.main`` in its process may put text (io.StringIO, no bytes
    underneath) in place of standard input: read as text, with the same checks."""
    import io

    from camillo.cli import main

    before = snapshot(vault)
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"type": "message", "text": "ok"}\n{"type": "message", "text": "\ud800"}\n'))
    assert main(["add", vault]) == 2
    assert snapshot(vault) == before
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"type": "message", "text": "from text"}\n'))
    assert main(["add", vault]) == 0
    code, out, err = cli("log", vault, "--json")
    assert "from text" in out, err



def test_an_export_to_any_place_exits_with_a_code_of_its_own(vault, tmp_path):
    """Any place given for an export (a file's path, a device, a name too long, a folder inside a file,
    the vault itself, the root): exit 0 with the export written, or a refusal naming the place (exit
    2-4), never an internal error; a place refused gets nothing written.  By hand on 2026-12-06:
    /dev/null/x and /proc/x gave internal errors."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    assert cli("add", vault, stdin=line(type="message", text="private", conversation="c", role="user"))[0] == 0
    (tmp_path / "a-file").write_text("x")
    fixed = ["/dev/null/x", "/proc/x", "/", str(tmp_path / "a-file"), str(tmp_path / "a-file" / "x"),
             str(tmp_path / ("n" * 300)), vault, str(tmp_path)]
    names = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=40)
    place = st.one_of(st.sampled_from(fixed), names.map(lambda n: str(tmp_path / "out" / n)))

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(kind=st.sampled_from(["pam", "portable-memory"]), out=place)
    def check(kind: str, out: str) -> None:
        existed = os.path.exists(out)
        code, _, err = cli("export", kind, vault, out)
        assert code in (0, 2, 3, 4) and "internal error" not in err and "Traceback" not in err, (out, code, err)
        if code != 0 and not existed:
            assert not os.path.isdir(out) or not os.listdir(out), (out, err)

    check()


def test_export_never_inside_a_vault_folder(vault, tmp_path):
    """An export is the memory in plaintext: inside the vault folder it would travel to the sync
    service.  Refused with exit 2 naming the folder; nothing is written."""
    assert cli("add", vault, stdin=line(type="message", text="private"))[0] == 0
    before = snapshot(vault)
    for kind in ("pam", "portable-memory"):
        for out in (os.path.join(vault, "export"), vault, os.path.join(vault, "segments", "x")):
            code, _, err = cli("export", kind, vault, out)
            assert "is inside the vault folder" in refused(code, err) and "plaintext" in err, err
    assert snapshot(vault) == before
    code, _, err = cli("export", "pam", vault, str(tmp_path / "export"))
    assert code == 0, err


def test_an_export_of_any_record_the_vault_takes_exits_0_and_is_well_formed(vault, tmp_path):
    """Whatever keyed record or note ``camillo add`` accepted (any JSON value, any text: control
    characters, newlines, other scripts, large and negative numbers), both exports of the vault exit 0:
    PAM's checksum is the RFC 8785 form of the memories it wrote, and every Portable Memory file holds
    one JSON object a line, sorted.  A record add refuses (a float, a bad key) exits 2, never an internal
    error."""
    from camillo.exporters import jcs
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)
    value = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63) | text,
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                         max_leaves=8)
    keyed = st.fixed_dictionaries({"type": st.sampled_from(["fact", "preference", "instruction"]),
                                   "key": st.from_regex(r"user/[a-z_]{1,12}", fullmatch=True), "value": value})
    note = st.fixed_dictionaries({"type": st.sampled_from(["event", "decision", "message"]), "text": text},
                                 optional={"value": value, "conversation": text, "role": text})
    hostile = st.fixed_dictionaries({"type": st.sampled_from(["fact", "event"]), "key": text, "value": value | st.floats()},
                                    optional={"text": text})  # (refused: exit 2 naming the line)
    record = st.one_of(keyed, note, hostile)
    runs = iter(range(10**6))
    added: list[dict] = []

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(rec=record)
    @example(rec={"type": "fact", "key": "user/home_city", "value": {"name": "Lisbon\u2028\x00\u0085", "n": -2**63}})
    def check(rec: dict) -> None:
        code, _, err = cli("add", vault, stdin=json.dumps(rec).encode())
        assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (rec, code, err)
        added.extend([rec] if code == 0 else [])
        n = next(runs)
        for kind in ("pam", "portable-memory"):
            out = tmp_path / f"{kind}-{n}"
            code, _, err = cli("export", kind, vault, str(out))
            assert code == 0, (rec, kind, err)
            if kind == "pam":
                store = json.loads((out / "memory-store.json").read_text())
                assert store["integrity"]["checksum"] == "sha256:" + hashlib.sha256(jcs(store["memories"])).hexdigest()
                assert [m["id"] for m in store["memories"]] == sorted(m["id"] for m in store["memories"])
            else:
                for f in out.glob("items/*"):  # (none while the vault is empty)
                    lines = f.read_text(encoding="utf-8").split("\n")[:-1]  # (JSON Lines: U+2028 is no line end)
                    assert lines == sorted(lines) and all(isinstance(json.loads(x), dict) for x in lines), f

    check()
    assert added, "the vault took none of the records: nothing was exported"


def test_any_text_to_the_reading_commands_exits_0_to_4(vault):
    """Whatever text is given to ``search``, ``facts --subject``, ``log --conversation`` or ``fact`` (operators,
    quotes and punctuation alone, control characters, and bytes the terminal could not decode, which Python
    keeps as lone surrogates) exits 0 to 4, never an internal error.  Found by hand: a query of ``"``, ``*``
    or ``-`` alone made an empty FTS5 query (exit 70), and a ``--subject``, query, key or conversation that
    was not UTF-8 failed in the encoder (exit 70)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    assert cli("add", vault, stdin=line(type="message", text="hello - world", conversation="c", role="user"))[0] == 0
    assert cli("add", vault, stdin=line(type="fact", key="user/a%_b", value="x"))[0] == 0
    hostile = st.one_of(st.sampled_from(['"', "*", "-", "-- **", '"!!"', "a OR", "NEAR(", "key:", "\udcff", "user/\udcff",
                                         "%", "_", "user_", "\\"]),
                        st.text(max_size=12))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(command=st.sampled_from(["search", "facts", "log", "fact"]), text=hostile)
    def check(command: str, text: str) -> None:
        args = {"search": ["search", vault, text], "facts": ["facts", vault, "--subject", text],
                "log": ["log", vault, "--conversation", text], "fact": ["fact", vault, text]}[command]
        code, _, err = cli(*args)
        assert code in (0, 1, 2, 3, 4) and "internal error" not in err and "Traceback" not in err, (args, code, err)

    check()
    assert cli("search", vault, "-")[:2] == (0, "")  # punctuation alone matches nothing
    assert cli("search", vault, "hello -")[0] == 0 and "hello" in cli("search", vault, "hello -")[1]
    code, _, err = cli("facts", vault, "--subject", "\udcff")
    assert code == 2 and "the subject given is not valid UTF-8" in err
