"""The command line on a vault in a real object store (SeaweedFS on loopback): the round trip of
issue 20 (init, add, log, verify, pack, unpack into the store, merge both ways, info), two
installations writing to one bucket at once, and bad input (a wrong endpoint, a missing bucket,
wrong keys, a bucket holding something else, an object claiming 10 GB): one line naming the URL,
exit 4 (3 for keys), nothing written.

pytest main thread; the CLI runs as separate processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import types

import pytest

from tests.core.test_cli import PASSPHRASE, jsonl

from .conftest import url


def run(*args: str, home: str, stdin: str | None = None, env: dict | None = None, check: int | None = 0,
        process: bool = False):
    """``camillo ARGS`` as a separate process (``process=True``), or through the same entry point in
    this process (``camillo.cli.main``: the same parser, handlers and exit codes, without paying
    the interpreter's and botocore's start-up for every command)."""
    full = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=home, **(env or {}))
    if process:
        proc = subprocess.run([sys.executable, "-m", "camillo.cli", *args], input=stdin, capture_output=True,
                              text=True, env=full, timeout=120)
    else:
        proc = in_process(list(args), full, stdin)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def in_process(argv: list[str], env: dict[str, str], stdin: str | None) -> types.SimpleNamespace:
    from camillo.cli import main

    saved_env, saved_stdin = dict(os.environ), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = io.StringIO(stdin or "")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.stdin = saved_stdin
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def objects(server, bucket: str, prefix: str = "") -> dict[str, bytes]:
    client = server.client()
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            out[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return out


def add(location: str, home: str, *texts: str, compartment: str = "personal", env: dict | None = None) -> list[str]:
    lines = "\n".join(json.dumps({"type": "message", "role": "user", "text": t}) for t in texts)
    return [x["id"] for x in jsonl(run("add", location, "--compartment", compartment, stdin=lines, home=home,
                                       env=env).stdout)]


def texts(location: str, home: str, env: dict | None = None) -> set[str]:
    return {r.get("text") for r in jsonl(run("log", location, "--json", home=home, env=env).stdout)}


def test_round_trip_on_a_real_object_store(s3env, bucket, tmp_path):
    home_a, home_b = str(tmp_path / "home-a"), str(tmp_path / "home-b")
    s3 = f"s3://{bucket}/me/memory"
    endpoint = {"CAMILLO_S3_ENDPOINT": s3env.endpoint}
    # init with --endpoint-url; the other commands take the endpoint from CAMILLO_S3_ENDPOINT
    init = run("init", s3, "--endpoint-url", s3env.endpoint, home=home_a, process=True)
    assert len(init.stdout.split()) == 24
    stored = objects(s3env, bucket)
    assert "me/memory/VMEM" in stored and any(k.startswith("me/memory/segments/") for k in stored)
    ids = add(s3, home_a, "I live in Lisbon", "I like figs", env=endpoint)
    assert len(ids) == 2
    assert {"I live in Lisbon", "I like figs"} <= texts(s3, home_a, env=endpoint)
    verify = json.loads(run("verify", s3, "--json", home=home_a, env=endpoint, process=True).stdout)
    assert verify["ok"] is True and verify["records"] >= 2
    # what the provider sees: names, sizes, times, ETags; no plaintext
    info = json.loads(run("info", s3, "--json", home=home_a, env=endpoint).stdout)
    assert info["kind"] == "object store" and info["location"] == s3
    assert all("modified" in f and "etag" in f for f in info["files"])
    assert not any(b"Lisbon" in data for data in objects(s3env, bucket).values())

    # pack to a .vmem, unpack it into another prefix of the bucket: the same log
    vmem = str(tmp_path / "v.vmem")
    run("pack", s3, vmem, home=home_a, env=endpoint)
    copy = f"s3://{bucket}/copy"
    run("unpack", vmem, copy, home=home_a, env=endpoint)
    assert texts(copy, str(tmp_path / "home-c"), env=endpoint) == texts(vmem, home_a)

    # a folder on the laptop (another installation) and the bucket, each written, merged both ways
    folder = str(tmp_path / "laptop")
    run("unpack", vmem, folder, home=home_b)
    add(folder, home_b, "written on the laptop")
    add(s3, home_a, "written to the bucket", env=endpoint)
    merged = run("merge", folder, s3, "--json", home=home_b, env=endpoint)
    assert jsonl(merged.stdout)
    run("merge", s3, folder, "--endpoint-url", s3env.endpoint, home=home_a)
    for location, home in ((folder, home_b), (s3, home_a)):
        assert {"written on the laptop", "written to the bucket", "I like figs"} <= texts(location, home, env=endpoint)
        assert json.loads(run("verify", location, "--json", home=home, env=endpoint).stdout)["ok"] is True
    # merging again copies nothing
    again = run("merge", s3, folder, "--json", home=home_a, env=endpoint)
    assert json.loads(again.stdout.splitlines()[-1]).get("copied", 0) in (0, [])


WRITER = r"""
import sys
from camillo import NewRecord, Unlock, Vault, storepacks
location, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
storepacks.PACK_AFTER = int(sys.argv[5])
with Vault.open(location, Unlock.passphrase(sys.argv[4]), device_name=who) as vault:
    for i in range(n):
        vault.append([NewRecord(type="message", role="user", text=f"{who} {i}")])
        if i % 4 == 3:
            vault.refresh()  # the other's segments come in, and are packed with these
print("done")
"""


@pytest.mark.parametrize("pack_after", [256, 3], ids=["loose", "both-packing"])
def test_two_installations_write_to_one_bucket_at_once(s3env, bucket, tmp_path, pack_after):
    location = url(bucket, "shared", s3env.endpoint)
    homes = [str(tmp_path / f"home-{i}") for i in range(3)]
    run("init", location, home=homes[0])
    # the second installation registers first, so both start writing at the same moment
    run("log", location, home=homes[1])
    n = 12
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, location, who, str(n), PASSPHRASE, str(pack_after)],
                              env=dict(os.environ, CAMILLO_HOME=home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for who, home in (("alpha", homes[0]), ("beta", homes[1]))]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0 and "done" in out, err
    expected = {f"{who} {i}" for who in ("alpha", "beta") for i in range(n)}
    for home in homes:  # both writers, and a third installation that never wrote
        assert expected <= texts(location, home)
        verify = json.loads(run("verify", location, "--json", home=home).stdout)
        assert verify["ok"] is True, verify["problems"]
    if pack_after < 256:
        keys = {o["Key"] for page in s3env.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="shared/packs/") for o in page.get("Contents", [])}
        assert keys, "both wrote packs while the other wrote"


# ---------------------------------------------------------------------------------------------- bad input


def one_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("camillo: ")
    return lines[0]


def nothing_local(home: str) -> bool:
    data = os.path.join(home, "data")
    return not os.path.exists(os.path.join(data, "vaults")) and not os.path.exists(os.path.join(data, "mirrors"))


def test_bad_input_is_one_clear_line(s3env, bucket, proxy, tmp_path):
    home = str(tmp_path / "home")
    # a wrong endpoint: nothing listens there
    line = one_line(run("init", f"s3://{bucket}/v", "--endpoint-url", "http://127.0.0.1:9", home=home, check=4))
    assert f"s3://{bucket}/v" in line and "endpoint" in line
    # a missing bucket
    line = one_line(run("init", url("no-such-bucket", "v", s3env.endpoint), home=home, check=4))
    assert "bucket no-such-bucket does not exist" in line and "s3://no-such-bucket/v" in line
    # wrong keys: exit 3
    line = one_line(run("init", url(bucket, "v", s3env.endpoint), home=home, env={"AWS_SECRET_ACCESS_KEY": "wrong"},
                        check=3, process=True))
    assert "refused the keys" in line and f"s3://{bucket}/v" in line
    assert nothing_local(home) and objects(s3env, bucket) == {}
    # a store that ignores If-None-Match gets no vault
    proxy.faults.ignore_conditions = True
    line = one_line(run("init", url(bucket, "v", proxy.endpoint), home=home, check=4))
    assert "does not honour conditional writes" in line and f"s3://{bucket}/v" in line
    proxy.faults.ignore_conditions = False
    assert nothing_local(home) and objects(s3env, bucket) == {}
    # a bucket holding something else
    s3env.client().put_object(Bucket=bucket, Key="photos/cat.jpg", Body=b"\xff\xd8 not a vault")
    line = one_line(run("log", url(bucket, "photos", s3env.endpoint), home=home, check=4))
    assert f"s3://{bucket}/photos" in line and "is not a VMEM vault" in line and "1 other object" in line
    line = one_line(run("log", url(bucket, "", s3env.endpoint), home=home, check=4))
    assert "is not a VMEM vault" in line
    assert nothing_local(home)
    # init where a vault already is
    good = url(bucket, "v", s3env.endpoint)
    run("init", good, home=home)
    before = objects(s3env, bucket)
    line = one_line(run("init", good, home=str(tmp_path / "other"), check=4))
    assert "already holds a vault" in line
    # an object of 10 GB claiming to be a segment (the listing says so): refused before any download
    segment = next(k for k in before if "/segments/" in k)
    proxy.faults.claimed_size[segment] = 10 << 30
    fresh = str(tmp_path / "fresh")
    line = one_line(run("log", url(bucket, "v", proxy.endpoint), home=fresh, check=4, process=True))
    assert segment.split("/", 1)[1] in line and "10.0 GB" in line and "remove that object" in line
    assert f"s3://{bucket}/v" in line
    assert objects(s3env, bucket) == before
    assert not os.path.exists(os.path.join(fresh, "data", "vaults"))
    assert proxy.count("GET", 200) == proxy.count("GET", 200)  # the proxy answered; no 10 GB was read


@pytest.mark.parametrize("location", ["s3://", "s3://bucket/x?color=red", "s3://b/x?endpoint=ftp://h"])
def test_malformed_locations_are_usage_errors(location, tmp_path):
    line = one_line(run("log", location, home=str(tmp_path / "h"), check=2))
    assert "s3://" in line
