"""The vault facade's reads of memory: the timeline, conversations, records, facts, the inbox and
search, as the desktop, the command line and agents browse them.  Mixed into
:class:`camillo.vault.Vault` (one facade; this module keeps it readable).

The timeline and the conversation list are read a page at a time from the local state's indexes
(:mod:`camillo.timeline`, :mod:`camillo.ops.conversations`), so that their first page costs the
same in a vault of a million records as in an empty one.

Confined to the thread that owns the vault (each method runs the facade's guard, :mod:`camillo.facade`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import timeline
from .errors import UsageError
from .facade import checked
from .ops import conversations, curation, reports
from .recordviews import FactView, RecordView
from .search import search, semantic_search
from .session import Session
from .values import ConversationInfo, SearchPage


class Reading:
    """What :class:`~camillo.vault.Vault` reads of memory (``session`` is the vault's)."""

    session: Session

    @checked
    def timeline(self, offset: int = 0, limit: int | None = None, *, descending: bool = False,
                 after: bytes | None = None, **filters: Any) -> list[RecordView]:
        """Rows ``offset`` to ``offset + limit`` of the timeline in time order (``descending``: newest
        first), read from the state's time index: a page costs the page, whatever the vault's size;
        ``after`` (a record id): the rows after that record, as a listing reads on page after page.
        Filters: ``include_hidden``, ``compartments`` (ids), ``conversation``."""
        self.session.require_read()
        state = self.session.materialized
        return state.records_at(timeline.page_rowids(state, offset=offset, limit=limit, descending=descending,
                                                     after=after, **filters))

    @checked
    def timeline_count(self, **filters: Any) -> int:
        """How many rows the timeline has with these filters (counted in the index, no record read)."""
        self.session.require_read()
        return timeline.count(self.session.materialized, **filters)

    @checked
    def timeline_row(self, record_id: bytes | None = None, *, day: int | None = None, descending: bool = False,
                     **filters: Any) -> int | None:
        """The row of ``record_id`` in the timeline (None when it is not shown), or of the first
        record of the ``day`` starting at that Unix time (the count of rows when none is)."""
        self.session.require_read()
        state = self.session.materialized
        if record_id is not None:
            return timeline.row_of(state, record_id, descending=descending, **filters)
        if day is None:
            raise UsageError("timeline_row: give a record or a day")
        return timeline.row_of_day(state, day, descending=descending, **filters)

    @checked
    def timeline_ids(self, **filters: Any) -> list[bytes]:
        """Ids in ``order`` (time, compartment, type, authority, writer or text; ``descending``)."""
        self.session.require_read()
        return reports.timeline_ids(self.session, **filters)

    @checked
    def conversations(self, **filters: Any) -> list[ConversationInfo]:
        """Conversations, newest activity first (filters: ``text``, ``compartment``, ``agent``;
        ``offset`` and ``limit`` for one page: without a text or agent filter a page costs the page)."""
        self.session.require_read()
        return conversations.conversations(self.session, **filters)

    @checked
    def conversation(self, conversation: str, compartment: str) -> ConversationInfo | None:
        """One conversation as :meth:`conversations` lists it (None when nothing of it is shown)."""
        self.session.require_read()
        return conversations.summary(self.session, conversation, compartment)

    @checked
    def conversation_count(self, *, compartment: str | None = None) -> int:
        """How many conversations there are (in ``compartment``), counted in the state's index."""
        self.session.require_read()
        return conversations.count(self.session, compartment=compartment)

    @checked
    def conversation_ids(self, conversation: str, compartment: str, *, include_hidden: bool = False) -> list[bytes]:
        self.session.require_read()
        return reports.conversation_ids(self.session, conversation, compartment, include_hidden=include_hidden)

    @checked
    def records(self, ids_: Iterable[bytes]) -> list[RecordView]:
        self.session.require_read()
        return self.session.materialized.records(ids_)

    @checked
    def record(self, rid: bytes) -> RecordView | None:
        self.session.require_read()
        return self.session.materialized.record(rid)

    @checked
    def find_record(self, prefix: str) -> RecordView:
        """A record by its hex id or a unique prefix of at least 8 digits."""
        return reports.find_record(self.session, prefix)

    @checked
    def facts(self, *, after: tuple[str, bytes] | None = None, offset: int = 0, limit: int | None = None,
              **filters: Any) -> list[FactView]:
        """The facts by key, then compartment id, each with its value, history and proposals: at most
        ``limit`` of them after the fact ``after`` (its key and compartment id) and the first ``offset``,
        a page read from the state's index of keys (after a fact, what a page costs does not grow with
        the vault; an offset walks the keys before it).  Filters:
        ``compartments`` (ids), ``subject`` (the keys ``<subject>/...``), ``status``, ``proposed``
        (with proposals waiting), ``forgotten`` (False: without the facts whose value was forgotten)."""
        self.session.require_read()
        return self.session.materialized.facts(after=after, offset=offset, limit=limit, **filters)

    @checked
    def fact_counts(self, **filters: Any) -> dict[str, int]:
        """How many facts there are of each status (``ok``, ``conflict``, ``deleted``, ``pending``; a
        status no fact has is absent), counted without reading a record.  Filters as :meth:`facts`."""
        self.session.require_read()
        return self.session.materialized.fact_counts(**filters)

    @checked
    def fact_subjects(self, **filters: Any) -> list[tuple[str, int]]:
        """The subjects of the facts' keys (``user`` of ``user/home_city``), in order, each with how
        many facts it has: the groups the desktop lists before it reads any of their facts."""
        self.session.require_read()
        return self.session.materialized.fact_subjects(**filters)

    @checked
    def fact_value_ids(self) -> list[tuple[bytes, str]]:
        """Each fact's binding value (or a conflict's preferred candidate) and each proposal waiting
        beside it, as (record id, ``ok`` | ``conflict`` | ``pending``): what an export reads a page
        at a time (the value only when it is a PUT), rather than every fact's history at once."""
        self.session.require_read()
        return self.session.materialized.fact_value_ids()

    @checked
    def fact(self, key: str, compartment: str | None = None) -> FactView:
        self.session.require_read()
        return curation.find_fact(self.session, key, compartment)

    @checked
    def conflicts(self) -> list[FactView]:
        self.session.require_read()
        return self.session.materialized.facts(status="conflict")

    @checked
    def inbox(self) -> list[RecordView]:
        """Proposals awaiting the user, beside (never in place of) a fact's value (spec §19.3)."""
        self.session.require_read()
        return [p for f in self.session.materialized.facts(proposed=True) for p in f.proposed]

    @checked
    def forgotten(self) -> list[tuple[RecordView, int | None]]:
        """Forgotten records (messages and values, hidden but not erased), with when they were forgotten."""
        self.session.require_read()
        return reports.forgotten(self.session)

    @checked
    def attachments_of(self, of: Iterable[bytes]) -> dict[bytes, list[RecordView]]:
        """The attachments of these records (not forgotten, readable here), by record."""
        self.session.require_read()
        return reports.attachments_of(self.session, of)

    @checked
    def imported_keys(self, prefix: str = "") -> set[str]:
        """The import keys (``meta.import``) already in the vault, for idempotent imports."""
        return self.session.materialized.import_keys(prefix)

    @checked
    def search(self, text: str, *, limit: int = 200) -> list[RecordView]:
        """Full-text search with field modifiers (see :mod:`camillo.search`)."""
        self.session.require_read()
        return search(self.session.materialized, text, limit=limit)

    @checked
    def search_page(self, text: str, *, offset: int = 0, limit: int = 200, order: str = "relevance") -> SearchPage:
        """A page of :meth:`search` (``order``: relevance or time), with the total and a snippet per hit."""
        self.session.require_read()
        return reports.search_page(self.session, text, offset=offset, limit=limit, order=order)

    @checked
    def semantic_search(self, text: str, embedder: Any, *, limit: int = 20) -> list[tuple[float, RecordView]]:
        self.session.require_read()
        self.session.reader.dirty = True  # new vectors are kept in the (encrypted) cache
        return semantic_search(self.session.materialized, text, embedder, limit=limit)
