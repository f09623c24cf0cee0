"""A guided tour of the ``camillo`` command line on a demo vault (``scripts/run`` without a vault).

It creates a small vault under ``$CAMILLO_HOME`` (or the platform data directory), writes a few
records through the same facade every client uses, and prints what each step shows.  Run with a
vault path to see that vault's timeline instead.  Runs on the main thread of its own process.
"""

from __future__ import annotations

import os
import sys
import tempfile

from .vault import NewRecord, Unlock, Vault

DEMO_PASSPHRASE = "correct horse battery staple demo"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        from .cli import main as cli_main

        return cli_main(["log", argv[0]])
    os.environ.setdefault("CAMILLO_HOME", tempfile.mkdtemp(prefix="camillo-tour-"))
    path = os.path.join(os.environ["CAMILLO_HOME"], "data", "demo-vault")
    print(f"Creating a demo vault in {path} (passphrase: {DEMO_PASSPHRASE!r})")
    vault, phrase = Vault.create(path, DEMO_PASSPHRASE)
    print(f"  recovery phrase (shown once): {phrase}")
    with vault:
        vault.append([
            NewRecord(type="conversation", conversation="c1", title="Planning the trip"),
            NewRecord(type="message", conversation="c1", role="user", text="I live in Lisbon and hate early flights."),
            NewRecord(type="message", conversation="c1", role="assistant", text="Noted: I will look for afternoon flights."),
            NewRecord(type="fact", key="user/home_city", value="Lisbon"),
        ])
        vault.append([NewRecord(type="fact", key="user/employer", value="Example Lda")], compartment="work")
    with Vault.open(path, Unlock.passphrase(DEMO_PASSPHRASE)) as vault:
        print("\nTimeline:")
        for v in vault.timeline():
            who = f"{v.role}: " if v.role else (f"{v.key} = " if v.key else "")
            print(f"  [{v.compartment:<8}] [{v.effective_label:<8}] {v.type:<12} {who}{v.text}")
        print(f"\nVerified: {vault.stats().batches} signed batches, problems: {len(vault.problems())}")
    view = Vault.host_view(path)
    print(f"\nWhat a host sees: {len(view['files'])} files, for example:")
    for f in view["files"][:4]:
        print(f"  {f['name']}  {f.get('size')} bytes")
    print("\nTry: camillo log", path, "   (passphrase in CAMILLO_PASSPHRASE)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
