"""The MCP server as the official TypeScript SDK client sees it (npm @modelcontextprotocol/sdk,
driven by tests/agents/ts-client/relay.mjs): the server's version, the tools a grant lists with their
titles, annotations and schemas, rule errors for reads outside the grant, structured results that
pass the SDK's own output-schema validation, and the warning every result carries.

The SDK is installed from tests/agents/ts-client/package-lock.json on first use (``npm ci``); the
tests skip, saying why, only where Node.js is missing or npm cannot install it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from camillo import NewRecord, Unlock, Vault

CLIENT = Path(__file__).parent / "ts-client"
READING = {"search_memory", "read_conversation", "list_facts", "get_fact", "get_attachment"}
WRITING = {"append_messages", "propose"}
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@pytest.fixture(scope="module")
def node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed: the TypeScript SDK client cannot run")
    if not (CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=CLIENT,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            pytest.skip("npm could not install @modelcontextprotocol/sdk (no registry and nothing in npm's cache): "
                        + proc.stderr.strip()[-300:])
    return node


def relay(node: str, path: str, grant: str, home: Path, calls: list[dict]) -> dict:
    """Run the TypeScript client against ``camillo mcp``; its view of the server and each result."""
    proc = subprocess.run([node, str(CLIENT / "relay.mjs"), sys.executable, "-m", "camillo.cli", "mcp", path,
                           "--grant", grant], input=json.dumps(calls), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CAMILLO_HOME=str(home)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def ok(result: dict) -> dict:
    """A successful result, validated by the SDK against the tool's output schema (it throws otherwise)."""
    assert "thrown" not in result and not result.get("isError"), result
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


def error(result: dict) -> str:
    assert "thrown" not in result and result.get("isError") is True, result
    return result["content"][0]["text"]


def test_a_write_grant_through_the_typescript_sdk(vault_with_grants, tmp_path, node):
    path, grants, _ = vault_with_grants
    calls = [
        {"name": "grant_info"},
        {"name": "read_conversation", "arguments": {"conversation": "p1", "compartment": "personal"}},
        {"name": "list_facts", "arguments": {"compartment": "personal"}},
        {"name": "get_fact", "arguments": {"key": "user/home_city", "compartment": "personal"}},
        {"name": "get_fact", "arguments": {"key": "user/home_city"}},
        {"name": "list_facts", "arguments": {"compartment": "nope"}},
        {"name": "search_memory", "arguments": {"query": "morning", "limit": -5}},
        {"name": "append_messages", "arguments": {"conversation": "c1", "messages": [{"role": "system", "text": "x"}]}},
        {"name": "search_memory", "arguments": {"query": "morning"}},
        {"name": "read_conversation", "arguments": {"conversation": "c1"}},
        {"name": "list_facts", "arguments": {"subject": "user"}},
        {"name": "append_messages", "arguments": {"conversation": "c1", "title": "Hiring",
                                                  "messages": [{"role": "user", "text": "Thursday works"}]}},
        {"name": "propose", "arguments": {"kind": "preference", "key": "user/meeting_time", "value": "mornings"}},
        {"name": "list_my_proposals"},
        {"name": "get_fact", "arguments": {"key": "user/meeting_time"}},
        {"name": "propose", "arguments": {"kind": "fact", "key": "nokey", "value": "x"}},
    ]
    out = relay(node, path, grants["write"], tmp_path / "agent", calls)
    assert out["serverVersion"] == {"name": "camillo", "title": "Camillo memory vault",
                                    "version": importlib.metadata.version("camillo")}
    assert "warning" in out["instructions"]
    tools = {t["name"]: t for t in out["tools"]}
    assert set(tools) == READING | WRITING | {"grant_info", "list_my_proposals"}
    for t in tools.values():
        assert t["title"] and t["annotations"]["title"] == t["title"], t["name"]
        assert all(isinstance(t["annotations"][h], bool) for h in HINTS), t["name"]
        assert t["annotations"]["readOnlyHint"] is (t["name"] not in WRITING)
        assert all(p.get("description") for p in t["inputSchema"].get("properties", {}).values()), t["name"]
    limit = tools["search_memory"]["inputSchema"]["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"]) == (1, 200)
    schema = tools["append_messages"]["inputSchema"]
    message = schema["$defs"][schema["properties"]["messages"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert message["properties"]["role"]["enum"] == ["user", "assistant", "tool"] and "text" in message["required"]

    r = iter(out["results"])
    gid = ok(next(r))["grant_id"][:12]
    rule = (f"the grant of agent agent-write ({gid}) gives no access to compartment '{{}}' (rule: a grant covers "
            "only its compartments); it covers: work (write)")
    assert error(next(r)) == rule.format("personal")  # read_conversation: not an empty success
    assert error(next(r)) == rule.format("personal")  # list_facts
    assert error(next(r)) == rule.format("personal")  # get_fact: not "no fact"
    assert error(next(r)) == "no fact 'user/home_city' in work (every compartment this grant reads)"
    assert error(next(r)) == rule.format("nope")  # names only what the grant covers
    assert "greater than or equal to 1" in error(next(r))
    assert "'user', 'assistant' or 'tool'" in error(next(r))
    assert ok(next(r))["records"][0]["text"] == "I prefer meetings in the morning"
    assert [m.get("text") for m in ok(next(r))["records"]][1] == "I prefer meetings in the morning"
    assert [f["key"] for f in ok(next(r))["facts"]] == ["user/reply_style"]
    assert len(ok(next(r))["ids"]) == 2
    assert ok(next(r))["status"] == "pending"
    assert [p["key"] for p in ok(next(r))["proposals"]] == ["user/meeting_time"]
    fact = ok(next(r))["fact"]
    assert fact["status"] == "pending" and fact["value"] is None and fact["proposed"][0]["text"] == "mornings"
    assert error(next(r)) == "the key 'nokey' must look like <subject>/<attribute>, e.g. user/home_city"


def test_an_append_grant_through_the_typescript_sdk(vault_with_grants, tmp_path, node):
    path, grants, _ = vault_with_grants
    calls = [
        {"name": "search_memory", "arguments": {"query": "morning"}},
        {"name": "append_messages", "arguments": {"conversation": "x", "compartment": "personal",
                                                  "messages": [{"role": "tool", "text": "t"}]}},
        {"name": "propose", "arguments": {"kind": "fact", "key": "nokey", "value": "x"}},
        {"name": "propose", "arguments": {"kind": "fact", "key": "user/likes", "value": "espresso"}},
    ]
    out = relay(node, path, grants["append"], tmp_path / "agent", calls)
    assert {t["name"] for t in out["tools"]} == WRITING | {"grant_info"}
    compartment = {t["name"]: t for t in out["tools"]}["propose"]["inputSchema"]["properties"]["compartment"]
    assert compartment["anyOf"][0]["enum"] == ["work"]
    r = iter(out["results"])
    assert "(rule: append grants never read)" in error(next(r))
    text = error(next(r))
    assert text.endswith("it covers: work (append)") and "health" not in text
    assert error(next(r)) == "the key 'nokey' must look like <subject>/<attribute>, e.g. user/home_city"
    prop = ok(next(r))
    assert prop["key"].startswith("append/") and "warning" not in prop


def test_the_warning_reaches_the_typescript_sdk(vault_with_grants, tmp_path, node):
    """The grant used from two places at once: the vault refuses the forked writes, and every
    result says the view is incomplete and which writes were refused, in the JSON and in _meta."""
    path, grants, _ = vault_with_grants
    here = Vault.open(path, Unlock.grant(grants["write"]), home=str(tmp_path / "agent"))
    there = Vault.open(path, Unlock.grant(grants["write"]), home=str(tmp_path / "elsewhere"))
    here.append([NewRecord(type="message", conversation="c1", text="from here")], compartment="work")
    there.append([NewRecord(type="message", conversation="c1", text="from there")], compartment="work")
    here.lock()
    there.lock()
    out = relay(node, path, grants["write"], tmp_path / "agent",
                [{"name": "grant_info"}, {"name": "get_fact", "arguments": {"key": "user/none"}}])
    info, missing = out["results"]
    body = ok(info)
    assert next(iter(body)) == "warning" and "may be incomplete" in body["warning"]
    assert "refused" in body["notices"][0]
    assert info["_meta"]["camillo/warning"] == body["warning"] and info["_meta"]["camillo/sync"]["state"] != "up to date"
    assert error(missing).endswith(f"Warning: {body['warning']}")
