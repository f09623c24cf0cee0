"""The MCP server driven by the SDK's real Python client over stdio, under each level of grant:
what each grant sees (its tools, its compartments), the rule errors, the tools' schemas, and the
warning and notices every result carries."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys

import anyio
from camillo import NewRecord, Unlock, Vault
from mcp import Client, StdioServerParameters

from tests.agents.conftest import PASSPHRASE

READING = {"search_memory", "read_conversation", "list_facts", "get_fact", "get_attachment"}
WRITING = {"append_messages", "propose"}
ALL_TOOLS = READING | WRITING | {"grant_info", "list_my_proposals"}


def params(path: str, grant: str, home) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "camillo.cli", "mcp", path, "--grant", grant],
                                 env=dict(os.environ, CAMILLO_HOME=str(home)))


def payload(result):
    """The tool's result: one JSON object, the same as structured content and as text."""
    assert not result.is_error, result.content[0].text if result.content else result
    assert len(result.content) == 1 and json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def refusal(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def run(coro_fn):
    return anyio.run(coro_fn)


def test_tools_under_a_write_grant(vault_with_grants, tmp_path):
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["write"], tmp_path / "agent")) as c:
            assert {t.name for t in (await c.list_tools()).tools} == ALL_TOOLS
            info = payload(await c.call_tool("grant_info", {}))
            assert info["scopes"] == {"work": "write"} and info["max_class"] == "observed"
            assert "warning" not in info and "notices" not in info  # an up-to-date copy: nothing to say
            hits = payload(await c.call_tool("search_memory", {"query": "morning"}))["records"]
            assert len(hits) == 1 and hits[0]["authority"] == {"claimed": "user", "effective": "user", "binding": True}
            assert hits[0]["writer"]["kind"] == "device" and hits[0]["compartment"] == "work"
            assert payload(await c.call_tool("search_memory", {"query": "PERSONAL"}))["records"] == []
            # injected content is labelled: external, not binding
            inj = payload(await c.call_tool("search_memory", {"query": "invoices"}))["records"]
            assert inj[0]["authority"]["effective"] == "external" and inj[0]["authority"]["binding"] is False
            conv = payload(await c.call_tool("read_conversation", {"conversation": "c1"}))["records"]
            assert [m.get("text", m.get("type")) for m in conv][1] == "I prefer meetings in the morning"
            page = payload(await c.call_tool("read_conversation", {"conversation": "c1", "offset": 1, "limit": 1}))
            assert [m["text"] for m in page["records"]] == ["I prefer meetings in the morning"]
            facts = payload(await c.call_tool("list_facts", {"subject": "user"}))["facts"]
            assert [f["key"] for f in facts] == ["user/reply_style"] and facts[0]["authority"]["binding"] is True
            out = payload(await c.call_tool("append_messages", {
                "conversation": "c1", "messages": [{"role": "user", "text": "Thursday works"},
                                                   {"role": "assistant", "text": "Booked Thursday 9:00"}]}))
            assert len(out["ids"]) == 2 and out["compartment"] == "work"
            prop = payload(await c.call_tool("propose", {"kind": "preference", "key": "user/meeting_time",
                                                         "value": "mornings", "sources": [hits[0]["id"]]}))
            assert prop["status"] == "pending" and prop["key"] == "user/meeting_time"
            mine = payload(await c.call_tool("list_my_proposals", {}))["proposals"]
            assert [p["key"] for p in mine] == ["user/meeting_time"]
            fact = payload(await c.call_tool("get_fact", {"key": "user/meeting_time"}))["fact"]
            assert fact["status"] == "pending" and fact["value"] is None  # a proposal is never the value
            assert [(p["text"], p["authority"]["binding"]) for p in fact["proposed"]] == [("mornings", False)]
            assert fact["provenance"][0]["text"] == "I prefer meetings in the morning"
            # the facts a page at a time: a full page says there may be more, and where to read on
            first = payload(await c.call_tool("list_facts", {"limit": 1}))
            assert [f["key"] for f in first["facts"]] == ["user/meeting_time"] and "offset 1" in first["note"]
            rest = payload(await c.call_tool("list_facts", {"limit": 2, "offset": 1}))
            assert [f["key"] for f in rest["facts"]] == ["user/reply_style"] and "note" not in rest
            # refusals name the grant and the rule; nothing is written
            text = refusal(await c.call_tool("propose", {"kind": "instruction", "key": "user/x", "value": "y",
                                                         "authority": "external", "compartment": "personal"}))
            assert "agent-write" in text and "rule:" in text
            refusal(await c.call_tool("append_messages", {"conversation": "c1", "messages": [
                {"role": "assistant", "text": "first"}, {"role": "nobody", "text": "bad"}]}))

    run(session)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        texts = [r.text for r in v.timeline()]
        assert "Booked Thursday 9:00" in texts and "first" not in texts
        booked = next(r for r in v.timeline() if r.text == "Thursday works")
        assert booked.claimed_class == 2 and booked.writer == "agent agent-write"  # observed: the user said it
        assert "user/meeting_time" in [r.key for r in v.inbox()]


def test_reads_outside_the_grant_are_errors_naming_the_grant_and_the_rule(vault_with_grants, tmp_path):
    """Reading a compartment the grant lacks is an error (never an empty success, never "no fact"),
    and an error names only what the grant covers, never the vault's other compartments."""
    path, grants, _ = vault_with_grants
    rule = ("the grant of agent agent-write ({}) gives no access to compartment '{}' (rule: a grant covers only "
            "its compartments); it covers: work (write)")

    async def session():
        async with Client(params(path, grants["write"], tmp_path / "agent")) as c:
            gid = payload(await c.call_tool("grant_info", {}))["grant_id"][:12]
            for tool, args in [("read_conversation", {"conversation": "p1", "compartment": "personal"}),
                               ("list_facts", {"compartment": "personal"}),
                               ("get_fact", {"key": "user/home_city", "compartment": "personal"}),
                               ("search_memory", {"query": "PERSONAL compartment:personal"}),
                               ("append_messages", {"conversation": "p1", "compartment": "personal",
                                                    "messages": [{"role": "assistant", "text": "x"}]})]:
                assert refusal(await c.call_tool(tool, args)) == rule.format(gid, "personal"), tool
            # a compartment the vault does not have: the same answer, naming only the grant's compartments
            for tool, args in [("list_facts", {"compartment": "nope"}),
                               ("search_memory", {"query": "compartment:nope"}),
                               ("read_conversation", {"conversation": "c1", "compartment": "nope"})]:
                text = refusal(await c.call_tool(tool, args))
                assert text == rule.format(gid, "nope"), tool
                assert "health" not in text and "personal" not in text
            # not naming a compartment: what the grant reads, said as such (nothing of personal shows)
            text = refusal(await c.call_tool("get_fact", {"key": "user/home_city"}))
            assert text == "no fact 'user/home_city' in work (every compartment this grant reads)"
            note = payload(await c.call_tool("read_conversation", {"conversation": "p1"}))
            assert note["records"] == [] and "no records of conversation 'p1' in work" in note["note"]
            assert payload(await c.call_tool("list_facts", {}))["facts"][0]["key"] == "user/reply_style"

    run(session)


def test_read_grant_cannot_write(vault_with_grants, tmp_path):
    """A read grant lists only the reading tools; the writing ones, called anyway, answer with the rule."""
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["read"], tmp_path / "agent")) as c:
            assert {t.name for t in (await c.list_tools()).tools} == READING | {"grant_info"}
            assert payload(await c.call_tool("search_memory", {"query": "morning"}))["records"]
            # an unlisted tool still answers, with the rule
            text = refusal(await c.call_tool("append_messages", {"conversation": "c1", "messages": [
                {"role": "assistant", "text": "x"}]}))
            assert "agent-read" in text and "read grants cannot write" in text
            text = refusal(await c.call_tool("propose", {"kind": "fact", "key": "user/x", "value": "y",
                                                         "compartment": "work"}))
            assert "is read-only for work (rule: read grants cannot write)" in text
            assert "read grants cannot write" in refusal(await c.call_tool("list_my_proposals", {}))

    run(session)


def test_append_grant_adds_but_cannot_read(vault_with_grants, tmp_path):
    """An append grant lists only grant_info and the writing tools, every read is refused with the
    rule, and an error never tells it the vault's compartments (only its own)."""
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["append"], tmp_path / "agent")) as c:
            assert {t.name for t in (await c.list_tools()).tools} == WRITING | {"grant_info"}
            for tool, args in [("search_memory", {"query": "morning"}), ("list_my_proposals", {}),
                               ("list_facts", {}), ("read_conversation", {"conversation": "c1", "compartment": "work"})]:
                text = refusal(await c.call_tool(tool, args))
                assert "append-only" in text and "(rule: append grants never read)" in text, tool
            for name in ("personal", "nope"):
                text = refusal(await c.call_tool("append_messages", {"conversation": "x", "compartment": name,
                                                                     "messages": [{"role": "tool", "text": "t"}]}))
                assert text.endswith(f"gives no access to compartment '{name}' (rule: a grant covers only its "
                                     "compartments); it covers: work (append)")
                assert "health" not in text and ("personal" not in text or name == "personal")
            out = payload(await c.call_tool("append_messages", {"conversation": "web", "messages": [
                {"role": "tool", "text": "clipped article about espresso"}]}))
            assert len(out["ids"]) == 1 and "warning" not in out  # its own unreadable writes are no gap
            prop = payload(await c.call_tool("propose", {"kind": "fact", "key": "user/likes", "value": "espresso"}))
            assert prop["key"].startswith("append/") and prop["key"].endswith("/user_likes")
            assert "warning" not in payload(await c.call_tool("grant_info", {}))

    run(session)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        clip = next(r for r in v.timeline() if r.text == "clipped article about espresso")
        assert clip.effective_label == "external" and clip.writer == "agent agent-append"


def test_one_key_rule_for_every_level(vault_with_grants, tmp_path):
    """A key that is not <subject>/<attribute> is refused alike by a write and an append grant (an
    append grant's namespace does not make a bad key good), and by get_fact."""
    path, grants, _ = vault_with_grants
    expected = "the key 'nokey' must look like <subject>/<attribute>, e.g. user/home_city"

    async def session():
        for level in ("write", "append"):
            async with Client(params(path, grants[level], tmp_path / level)) as c:
                for key in ("nokey", " user/x", "user/x\n"):
                    text = refusal(await c.call_tool("propose", {"kind": "fact", "key": key, "value": "v"}))
                    assert "must look like <subject>/<attribute>" in text, (level, key)
                assert refusal(await c.call_tool("propose", {"kind": "fact", "key": "nokey", "value": "v"})) == expected
                if level == "write":
                    assert refusal(await c.call_tool("get_fact", {"key": "nokey"})) == expected

    run(session)


def test_a_mixed_grant_reads_one_compartment_and_appends_to_another(vault_with_grants, tmp_path):
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["mixed"], tmp_path / "agent")) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == READING | WRITING | {"grant_info"}  # it cannot read back what it proposes
            schema = tools["list_facts"].input_schema["properties"]["compartment"]
            assert schema["anyOf"][0]["enum"] == ["work"]
            assert tools["propose"].input_schema["properties"]["compartment"]["anyOf"][0]["enum"] == ["personal"]
            text = refusal(await c.call_tool("list_facts", {"compartment": "personal"}))
            assert "is append-only for personal" in text
            prop = payload(await c.call_tool("propose", {"kind": "fact", "key": "user/diet", "value": "vegetarian"}))
            assert prop["compartment"] == "personal" and prop["key"].startswith("append/")
            text = refusal(await c.call_tool("propose", {"kind": "fact", "key": "user/diet", "value": "v",
                                                         "compartment": "work"}))
            assert "is read-only for work (rule: read grants cannot write)" in text
            assert [f["key"] for f in payload(await c.call_tool("list_facts", {}))["facts"]] == ["user/reply_style"]

    run(session)


def test_every_tool_has_a_title_annotations_and_a_described_typed_schema(vault_with_grants, tmp_path):
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["write"], tmp_path / "agent")) as c:
            assert c.server_info.version == importlib.metadata.version("camillo")
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for t in tools.values():
                assert t.title and t.annotations.title == t.title and t.description, t.name
                a = t.annotations
                assert None not in (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint), t.name
                assert a.open_world_hint is False and a.destructive_hint is False
                assert a.read_only_hint is (t.name not in WRITING)
                for name, prop in t.input_schema.get("properties", {}).items():
                    assert prop.get("description"), (t.name, name)
                assert t.output_schema["type"] == "object" and "warning" in t.output_schema["properties"], t.name
            search = tools["search_memory"].input_schema
            assert search["required"] == ["query"]
            assert (search["properties"]["limit"]["minimum"], search["properties"]["limit"]["maximum"]) == (1, 200)
            conv = tools["read_conversation"].input_schema["properties"]
            assert (conv["limit"]["minimum"], conv["limit"]["maximum"]) == (1, 1000)
            assert conv["compartment"]["anyOf"][0]["enum"] == ["work"]
            append = tools["append_messages"].input_schema
            assert set(append["required"]) == {"conversation", "messages"}
            item = append["$defs"][append["properties"]["messages"]["items"]["$ref"].rsplit("/", 1)[1]]
            assert item["properties"]["role"]["enum"] == ["user", "assistant", "tool"]
            assert set(item["required"]) == {"role", "text"} and item["additionalProperties"] is False
            assert append["properties"]["messages"]["minItems"] == 1
            prop = tools["propose"].input_schema
            assert set(prop["required"]) == {"kind", "key", "value"}
            assert prop["properties"]["kind"]["enum"] == ["fact", "preference", "instruction"]
            assert prop["properties"]["authority"]["enum"] == ["observed", "inferred", "external"]
            assert "at most observed" in prop["properties"]["authority"]["description"]
            # the bounds hold on the server too
            for tool, args in [("search_memory", {"query": "x", "limit": -5}),
                               ("search_memory", {"query": "x", "limit": 201}),
                               ("read_conversation", {"conversation": "c1", "limit": 0}),
                               ("append_messages", {"conversation": "c1", "messages": []}),
                               ("append_messages", {"conversation": "c1", "messages": [{"role": "system",
                                                                                         "text": "x"}]}),
                               ("append_messages", {"conversation": "c1", "messages": [{"role": "user"}]}),
                               ("propose", {"kind": "fact", "key": "user/x", "value": "y", "sources": ["zz"]})]:
                refusal(await c.call_tool(tool, args))

    run(session)


def test_server_sees_new_writes_and_then_its_revocation(vault_with_grants, tmp_path):
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["write"], tmp_path / "agent")) as c:
            assert payload(await c.call_tool("search_memory", {"query": "Lisbon"}))["records"] == []
            with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "owner")) as owner:
                owner.append([NewRecord(type="message", text="moving to Lisbon")], compartment="work")
            hits = payload(await c.call_tool("search_memory", {"query": "Lisbon"}))["records"]
            assert len(hits) == 1, "the server reads other devices' writes between calls"
            with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "owner")) as owner:
                owner.revoke("agent-write")
            assert "was revoked" in refusal(await c.call_tool("search_memory", {"query": "Lisbon"}))
            assert "revoked" in refusal(await c.call_tool("append_messages", {"conversation": "c1", "messages": [
                {"role": "assistant", "text": "after"}]}))

    run(session)


def test_every_result_says_when_the_view_is_incomplete_and_which_writes_were_refused(vault_with_grants, tmp_path):
    """The same grant used from a second place at once forks its writer: the vault refuses those
    writes.  Every result then carries one warning (this copy is not up to date) first, in plain
    words, and a notice naming the refused writes; errors carry the warning too; ``_meta`` has both."""
    path, grants, _ = vault_with_grants

    async def session():
        async with Client(params(path, grants["write"], tmp_path / "agent")) as c:
            elsewhere = Vault.open(path, Unlock.grant(grants["write"]), home=str(tmp_path / "elsewhere"))
            try:
                payload(await c.call_tool("append_messages", {"conversation": "c1", "messages": [
                    {"role": "assistant", "text": "from the server"}]}))
                elsewhere.append([NewRecord(type="message", conversation="c1", text="from elsewhere")],
                                 compartment="work")
            finally:
                elsewhere.lock()
            result = await c.call_tool("list_facts", {})
            out = payload(result)
            assert next(iter(out)) == "warning" and "may be incomplete" in out["warning"]
            assert "batch" not in out["warning"] and "seq" not in out["warning"]  # plain words
            assert len(out["notices"]) == 1 and "of your write(s) in work were refused" in out["notices"][0]
            assert result.meta["camillo/warning"] == out["warning"]
            assert result.meta["camillo/sync"]["state"] == "syncing" and result.meta["camillo/sync"]["details"]
            assert result.meta["camillo/notices"] == out["notices"]
            text = refusal(await c.call_tool("get_fact", {"key": "user/nothing"}))
            assert text.startswith("no fact 'user/nothing' in work") and f"Warning: {out['warning']}" in text

    run(session)


def test_mcp_without_a_grant_is_a_usage_error(vault_with_grants):
    import subprocess

    path, _, _ = vault_with_grants
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", "mcp", path], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "needs --grant" in proc.stderr


def test_an_append_grant_sees_no_gap_in_what_it_cannot_read(vault_with_grants, tmp_path):
    """An append grant remembers its own writes but can never read them back; that is no sign of a
    copy still syncing or rolled back (else every MCP result would warn).  Observed on the facade:
    the MCP server's warning is Vault.sync_status()."""
    path, grants, _ = vault_with_grants
    home = str(tmp_path / "appender")
    for _ in range(2):
        with Vault.open(path, Unlock.grant(grants["append"]), home=home) as v:
            v.append([NewRecord(type="message", role="tool", text="clip")], compartment="work")
            assert v.sync_status().state == "up to date"
            assert [n.kind for n in v.notices()] == []
    with Vault.open(path, Unlock.grant(grants["mixed"]), home=home) as v:
        v.append([NewRecord(type="message", role="tool", text="clip")], compartment="personal")
        assert v.sync_status().state == "up to date"


def test_records_and_facts_the_server_returns_are_derived_from_their_json(new_vault):
    """record_json and fact_json regroup RecordView.to_json / FactView.to_json: same ids, classes,
    writer and text; a scalar value as is, a list or a byte string as its text, a map left out."""
    from camillo.mcp_server import fact_json, record_json

    _, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon", ts=1700000000),
                  NewRecord(type="fact", key="user/shoe", value=43),
                  NewRecord(type="fact", key="user/blob", value=b"\x00raw"),
                  NewRecord(type="fact", key="user/like_bytes", value={"bytes": "0072617700"}),
                  NewRecord(type="fact", key="user/list", value=[1, "two"]),
                  NewRecord(type="preference", key="user/units", value="metric", role="assistant"),
                  NewRecord(type="message", conversation="c1", role="user", text="hello")])
    by_key = {}
    for v in vault.timeline():
        j, r = v.to_json(), record_json(v)
        assert (r["id"], r["type"], r["kind"], r["compartment"]) == (j["id"], j["type"], j["kind"], j["compartment"])
        assert r["writer"] == {"name": j["writer_name"], "kind": j["writer_kind"], "id": j["writer"]}
        assert r["authority"]["effective"] == j["effective_class"]
        assert r.get("text") == j.get("text") and r.get("key") == j.get("key") and r.get("role") == j.get("role")
        by_key[v.key or v.text] = r
    assert by_key["user/city"]["time"] == "2023-11-14T22:13:20Z" and by_key["user/city"]["value"] == "Lisbon"
    assert by_key["user/shoe"]["value"] == 43
    assert by_key["user/blob"]["value"] == json.dumps({"bytes": b"\x00raw".hex()})  # a byte string: its text
    assert "value" not in by_key["user/like_bytes"]  # a map that looks the same in JSON: left out
    assert by_key["user/list"]["value"] == '[1, "two"]'
    for f in vault.facts():
        j, out = f.to_json(), fact_json(f, detail=True)
        assert (out["key"], out["status"], out["record"], out["writer"]) == (j["key"], j["status"], j["record"],
                                                                            j["writer"])
        assert [h["id"] for h in out["history"]] == j["history"]
        if f.current is None:  # only proposals (user/units, an assistant's preference): no value, no authority
            assert out["authority"] is None and j["status"] == "pending" and j["proposed"]
        else:
            assert out["authority"]["binding"] is (j["effective_class"] == "user" and j["status"] == "ok")
        assert out["value"] == (f.current.text if f.current is not None else None)
        assert [p["id"] for p in out.get("proposed", [])] == [p["record"] for p in j["proposed"]]


def test_an_agent_fetches_the_attachments_its_grant_reads(vault_with_grants, tmp_path):
    """get_attachment: the exact bytes (base64, checked against the SHA-256) of a file in a compartment
    the grant reads, with the record it belongs to; a file above max_bytes is refused naming its size;
    a file in another compartment is refused naming the grant and the rule; an append grant has no such tool."""
    import base64
    import hashlib

    path, grants, _ = vault_with_grants
    photo = bytes(range(256)) * 40 + b"\x89PNG end"
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        msg = next(r for r in v.timeline() if r.text == "I prefer meetings in the morning")
        v.attach([photo], compartment="work", name="whiteboard.png", media_type="image/png", of=msg.id)
        v.attach([b"private scan"], compartment="personal", name="passport.pdf")
        work = next(r for r in v.timeline() if r.type == "attachment" and r.compartment == "work")
        private = next(r for r in v.timeline() if r.type == "attachment" and r.compartment == "personal")

    async def session():
        async with Client(params(path, grants["read"], tmp_path / "agent")) as c:
            hits = payload(await c.call_tool("search_memory", {"query": "type:attachment"}))["records"]
            assert [h["id"] for h in hits] == [work.id.hex()]  # found by search, within the grant only
            got = payload(await c.call_tool("get_attachment", {"record": work.id.hex()}))
            assert base64.b64decode(got["data_base64"]) == photo
            assert got["sha256"] == hashlib.sha256(photo).hexdigest() and got["size"] == len(photo)
            assert (got["name"], got["media_type"], got["of"]) == ("whiteboard.png", "image/png", msg.id.hex())
            text = refusal(await c.call_tool("get_attachment", {"record": work.id.hex(), "max_bytes": 100}))
            assert f"has {len(photo):,} bytes, more than the 100" in text
            text = refusal(await c.call_tool("get_attachment", {"record": private.id.hex()}))
            assert "agent-read" in text and "rule: a grant reads only its compartments" in text
            assert "passport" not in text and "personal" not in text
        async with Client(params(path, grants["append"], tmp_path / "agent2")) as c:
            assert "get_attachment" not in {t.name for t in (await c.list_tools()).tools}
            text = refusal(await c.call_tool("get_attachment", {"record": work.id.hex()}))
            assert "(rule: append grants never read)" in text

    run(session)
