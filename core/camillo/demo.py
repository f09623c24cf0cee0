"""A generated demo vault: a newcomer sees the product at once, and benchmarks get a reproducible corpus.

``build_demo_vault(path)`` writes, through the public facade only, what a person's vault looks like
after a few weeks with two devices and three agents: conversations over weeks in two compartments,
facts with history and provenance, a conflict between two devices, pending inferences proposed by
an agent, grants at each level, an erasure, and a hidden message.  ``records=N`` adds N more
messages (realistic lengths, several writers, two compartments, spread over two years) in bulk, for
benchmarks of 10k to 1M records.

Everything is deterministic for a given seed except key material.  The demo passphrase is public;
never use it for a real vault.  Runs on whatever thread calls it (the desktop runs it on its vault
worker thread).
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .values import Authority
from .vault import NewRecord, Unlock, Vault

DEMO_PASSPHRASE = "camillo demo passphrase"  # noqa: S105 - public on purpose: this vault is a demo
DEMO_KDF = (65536, 3, 4)  # the smallest parameters a writer may use; the demo must open quickly
DAY = 86400

CONVERSATIONS = [
    ("personal", "Planning the Lisbon trip", [
        ("user", "I want to spend four days in Lisbon in May, mostly walking and eating."),
        ("assistant", "Great choice. Alfama and Graça are best on foot; I would book a place near Largo do Intendente."),
        ("user", "I hate early flights, anything before 10 is a no."),
        ("assistant", "Noted: I will only look at flights leaving after 10:00."),
        ("user", "Also I'm vegetarian, so skip the seafood tours."),
        ("assistant", "Understood. Prado and Ao 26 both have excellent vegetarian menus."),
    ]),
    ("personal", "Sourdough starter", [
        ("user", "My starter smells like nail polish remover. Is it dead?"),
        ("assistant", "Not dead, just hungry: that acetone smell means it needs more frequent feeds. Try 1:5:5 twice a day."),
        ("user", "It doubled in six hours after two days of that. Thanks!"),
    ]),
    ("work", "Quarterly report draft", [
        ("user", "Can you tighten the executive summary of the Q3 report? Our team is still on Project Apollo."),
        ("assistant", "Here is a version at half the length, leading with the 18% latency reduction."),
        ("user", "Good. Keep answers short and in bullet points from now on, please."),
        ("assistant", "Will do."),
    ]),
    ("work", "Hiring loop for the data engineer role", [
        ("user", "We have three candidates for the data engineer role; I prefer meetings in the morning."),
        ("assistant", "I drafted a loop: a 45-minute systems interview and a pairing session, all before noon."),
        ("user", "Project Apollo ended; from this week the team works on Project Artemis."),
        ("assistant", "Updated the role description to mention Artemis and the streaming pipeline."),
    ]),
    ("personal", "Running plan", [
        ("user", "I'd like to run a half marathon in October. I can do 8 km comfortably now."),
        ("assistant", "A 16-week plan with three runs a week fits: one long run, one tempo, one easy."),
        ("user", "My knee hurts after the long runs."),
        ("assistant", "Drop the long run by 20% this week and add two strength sessions; if it persists, see a physio."),
    ]),
    ("health", "Blood test results", [
        ("user", "My ferritin came back at 18, the doctor suggested supplements."),
        ("assistant", "That is on the low side, common for vegetarians. Take them with vitamin C, away from coffee."),
    ]),
    ("personal", "Apartment search in Porto", [
        ("user", "We finally moved to Porto last week! Now looking for a place with a balcony."),
        ("assistant", "Congratulations! Cedofeita and Bonfim have the most listings with balconies in your range."),
        ("user", "My partner Ana wants to be near the metro."),
        ("assistant", "Then the Marquês and Heroísmo stations are good anchors for the search."),
    ]),
]

FILLER_TOPICS = [
    "the garden", "a book club pick", "tax forms", "a birthday present for Ana", "the weekly groceries",
    "a Python script that renames photos", "learning Portuguese verbs", "the car's inspection", "jazz records",
    "a conference talk proposal", "the team offsite", "kitchen renovation quotes", "a podcast recommendation",
]
FILLER_SENTENCES = [
    "Can you help me think through {t}?", "I keep postponing {t}; what is a small first step?",
    "Here is what I have so far about {t}, tell me what is missing.",
    "Summarise the main options for {t} in a few lines.",
    "Compare the two approaches to {t} we discussed last week.",
]
ANSWERS = [
    "Start with the part you can finish in twenty minutes, then decide about the rest tomorrow.",
    "There are three reasonable options; the cheapest one is also the easiest to undo, so I would start there.",
    "You already covered the essentials. The missing piece is a deadline, otherwise it will keep slipping.",
    "The first approach is faster to set up, the second is easier to maintain; given your time, take the first.",
]


@dataclass
class DemoInfo:
    path: str
    passphrase: str
    recovery_phrase: str
    homes: dict[str, str] = field(default_factory=dict)
    grants: dict[str, str] = field(default_factory=dict)
    records: int = 0


def _ts(now: int, days_ago: float) -> int:
    return int(now - days_ago * DAY)


def build_demo_vault(path: str, *, records: int = 0, seed: int = 7, home: str | None = None,
                     progress: Callable[[str], None] | None = None, kdf: tuple[int, int, int] = DEMO_KDF,
                     access: bool = True) -> DemoInfo:
    """Create the demo vault in ``path`` (an empty or new folder).  Its simulated installations
    (desktop, laptop, two agents) keep their local state in folders under ``home`` (default: a
    ``.homes`` folder beside the vault); open the result as the desktop with ``info.homes["desktop"]``."""
    rng = random.Random(seed)  # noqa: S311 - demo content, reproducible on purpose
    say = progress or (lambda _m: None)
    base = home or os.path.abspath(path).rstrip("/") + ".homes"
    homes = {name: os.path.join(base, name) for name in ("desktop", "laptop", "planner", "coder")}
    now = int(time.time())
    say("creating the vault")
    vault, phrase = Vault.create(path, DEMO_PASSPHRASE, device_name="desktop", kdf=kdf, home=homes["desktop"])
    info = DemoInfo(path, DEMO_PASSPHRASE, phrase, homes)
    message_ids: dict[str, bytes] = {}
    with vault:
        say("writing conversations")
        for n, (compartment, title, turns) in enumerate(CONVERSATIONS):
            start = 50 - n * 7
            cid = f"c{n + 1}"
            items = [NewRecord(type="conversation", conversation=cid, title=title, ts=_ts(now, start + 0.001))]
            for i, (role, text) in enumerate(turns):
                items.append(NewRecord(type="message", conversation=cid, role=role, text=text,
                                       ts=_ts(now, start - i * 0.02)))
            ch = vault.append(items, compartment=compartment)
            for rid, item in zip(ch.records, items):
                if item.text:
                    message_ids[item.text] = rid
        say("writing facts")
        vault.append([NewRecord(type="fact", key="user/home_city", value="Lisbon", sources=[], ts=_ts(now, 49))])
        vault.append([NewRecord(type="fact", key="user/home_city", value="Porto", ts=_ts(now, 8),
                                sources=[message_ids["We finally moved to Porto last week! Now looking for a place with a balcony."]])])
        vault.append([NewRecord(type="fact", key="user/partner_name", value="Ana", authority=Authority.OBSERVED,
                                sources=[message_ids["My partner Ana wants to be near the metro."]], ts=_ts(now, 7))])
        vault.append([NewRecord(type="fact", key="user/diet", value="vegetarian", authority=Authority.USER,
                                sources=[message_ids["Also I'm vegetarian, so skip the seafood tours."]], ts=_ts(now, 48))])
        vault.append([NewRecord(type="preference", key="user/flight_times", value="never before 10:00",
                                sources=[message_ids["I hate early flights, anything before 10 is a no."]], ts=_ts(now, 48))])
        vault.append([NewRecord(type="fact", key="work/project", value="Apollo", ts=_ts(now, 36),
                                sources=[message_ids["Can you tighten the executive summary of the Q3 report? Our team is still on Project Apollo."]])],
                     compartment="work")
        vault.append([NewRecord(type="fact", key="work/project", value="Artemis", ts=_ts(now, 28),
                                sources=[message_ids["Project Apollo ended; from this week the team works on Project Artemis."]])],
                     compartment="work")
        vault.append([NewRecord(type="fact", key="user/ferritin", value="18 ng/mL (low)", authority=Authority.USER,
                                sources=[message_ids["My ferritin came back at 18, the doctor suggested supplements."]],
                                ts=_ts(now, 8))], compartment="health")
        vault.append([NewRecord(type="event", text="Moved to Porto", ts=_ts(now, 9))])
        vault.append([NewRecord(type="decision", text="Half marathon in October: 16-week plan", ts=_ts(now, 14))])
        vault.append([NewRecord(type="fact", key="user/favorite_coffee", value="flat white", ts=_ts(now, 20))])
        secret = vault.append([NewRecord(type="message", conversation="c1", role="user",
                                         text="My bank card PIN is 4921, remind me if I forget.",
                                         ts=_ts(now, 47.9))]).records[0]
        hidden = vault.append([NewRecord(type="message", conversation="c2", role="user",
                                         text="Ugh, ignore that last message, wrong chat.", ts=_ts(now, 42.9))]).records[0]
        vault.forget(record=hidden)
        if access:
            say("granting agents")
            grants_dir = os.path.join(base, "grants")
            os.makedirs(grants_dir, exist_ok=True)
            for agent, scopes, level in (("planner", {"personal": "write"}, "write"),
                                         ("coding-assistant", {"work": "write"}, "write"),
                                         ("health-coach", {"health": "read"}, "read"),
                                         ("web-clipper", {"personal": "append"}, "append")):
                out = os.path.join(grants_dir, f"{agent}.grant")
                if os.path.exists(out):
                    os.unlink(out)
                vault.create_grant(agent, scopes, out, max_class="observed" if level == "write" else "inferred")
                info.grants[agent] = out
            say("erasing a record")
            vault.erase([secret])
    if access:
        # The planner agent proposes inferences: they wait in the inbox.
        with Vault.open(path, Unlock.grant(info.grants["planner"]), home=homes["planner"]) as planner:
            src = planner.search("morning meetings") or planner.search("morning")
            planner.append([NewRecord(type="preference", key="user/meeting_time", value="mornings",
                                      sources=[src[0].id] if src else [], ts=_ts(now, 25))])
            planner.append([NewRecord(type="instruction", key="user/reply_style", value="short, in bullet points",
                                      ts=_ts(now, 35))])
            planner.append([NewRecord(type="fact", key="user/knee_injury", value="pain after long runs",
                                      authority=Authority.OBSERVED, ts=_ts(now, 12))])
            # A proposal over a value the user set: shown beside it, never in its place.
            planner.append([NewRecord(type="fact", key="user/diet", value="pescatarian",
                                      authority=Authority.INFERRED, ts=_ts(now, 6))])
        with Vault.open(path, Unlock.grant(info.grants["coding-assistant"]), home=homes["coder"]) as coder:
            coder.append([NewRecord(type="summary", text="The user leads Project Artemis and prefers concise answers.",
                                    meta={"frequency": 4}, ts=_ts(now, 27))], compartment="work")
        # The laptop: a second device, which edits the same fact while offline (a conflict).
        say("a second device and a conflict")
        copy = path.rstrip("/") + ".laptop-copy"
        if os.path.exists(copy):
            shutil.rmtree(copy)
        shutil.copytree(path, copy)
        with Vault.open(copy, Unlock.passphrase(DEMO_PASSPHRASE), home=homes["laptop"], device_name="laptop") as laptop:
            laptop.append([NewRecord(type="fact", key="user/favorite_coffee", value="espresso", ts=_ts(now, 3))])
            laptop.append([NewRecord(type="message", conversation="c7", role="user",
                                     text="Found a place near Heroísmo with a big balcony!", ts=_ts(now, 2))])
        with Vault.open(path, Unlock.passphrase(DEMO_PASSPHRASE), home=homes["desktop"]) as desktop:
            desktop.append([NewRecord(type="fact", key="user/favorite_coffee", value="galão", ts=_ts(now, 3))])
        Vault.merge(path, copy)
        shutil.rmtree(copy)
    if records:
        say(f"adding {records} records")
        info.records = add_bulk(path, records, seed=rng.randrange(1 << 30), homes=homes, now=now)
    return info


def add_bulk(path: str, count: int, *, seed: int = 7, homes: dict[str, str] | None = None, now: int | None = None,
             chunk: int = 5000, progress: Callable[[int, int], None] | None = None) -> int:
    """Append ``count`` realistic messages in bulk (several writers, two compartments, two years)."""
    rng = random.Random(seed)  # noqa: S311 - demo content, reproducible on purpose
    now = now or int(time.time())
    homes = homes or {}
    writers: list[str | None] = [h for h in (homes.get("desktop"), homes.get("laptop")) if h] or [None]
    written = 0
    per_writer = [count // len(writers) + (1 if i < count % len(writers) else 0) for i in range(len(writers))]
    for home, n in zip(writers, per_writer):
        with Vault.open(path, Unlock.passphrase(DEMO_PASSPHRASE), home=home) as vault:
            done = 0
            conv = 0
            while done < n:
                size = min(chunk, n - done)
                items = []
                for _ in range(size):
                    if rng.random() < 0.1:
                        conv += 1
                    topic = rng.choice(FILLER_TOPICS)
                    user = rng.random() < 0.5
                    text = (rng.choice(FILLER_SENTENCES).format(t=topic) if user else rng.choice(ANSWERS))
                    text += " " + " ".join(rng.choice(ANSWERS).split()[: rng.randrange(0, 40)])
                    items.append(NewRecord(type="message", conversation=f"bulk-{conv}",
                                           role="user" if user else "assistant", text=text.strip(),
                                           ts=_ts(now, rng.uniform(0, 730))))
                vault.append(items, compartment="personal" if rng.random() < 0.7 else "work")
                done += size
                written += size
                if progress:
                    progress(written, count)
    return written
