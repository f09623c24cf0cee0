"""The records of many batches checked in a process of their own, beside the read that opened them.

A cold open (or a merge, or a re-open after many new batches) decodes and checks every record it
reads (:func:`camillo.records.decode_record`: the id its batch header lists, the deterministic CBOR
profile, the fields), about 40 µs a record of Python that holds the interpreter lock, and then
stages it in the local state, about as long again.  :class:`RecordChecker` runs the checks in a child
Python process fed through a pipe while the reading process decrypts the next segments and stages
the records already checked: the two halves run on two cores.  The child says of each batch whether
every one of its records checked and, for one that did, what the local state stores of each record
(:func:`camillo.rowfields.record_fields`, the same code the reader runs): the reader stages such a
batch from those fields without decoding its records again.  It decodes a batch that did not check
in its own process again, to report its exact problem, so a problem reads the same with or without
the child; and a batch holding a control record, whose records the roster needs decoded.

The records go to the child through an anonymous pipe and nothing of them reaches a disk; the child
is a copy of this same code (the ``camillo`` package directory of the parent, without the package's
``__init__``, under ``python -I``), started when a read has enough records to repay its start (about
0.1 s, 30 MB) and ended with the read: it exits when the pipe closes, so it never outlives its parent.
When no child can be started, or it dies, the reader checks the records itself, as it did before.

Frames (little-endian ``u32``): to the child, a length, then the batch count and per batch the record
count and per record its 32-byte expected id, a length and its bytes; from the child, one byte
``R`` once it is ready, then per frame a length and a ``marshal`` of a list with an item per batch:
None when a record of it did not check, else the list of its records' fields.  (``marshal``: the
child is this installation's own code at the other end of an anonymous pipe, as trusted as the
reader itself, which takes its verdicts as they are.)

Confined to the thread that owns the vault; the class's two threads only move bytes through the pipe.
"""

from __future__ import annotations

import marshal
import os
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

from .records import Batch, decode_record
from .rowfields import Fields, record_fields

_U32 = struct.Struct("<I")
FRAME_RECORDS = 2048  # records per frame: large enough that a frame's overhead is a fraction of its checks
DEPTH = 3  # frames sent and not answered before the reader waits for the oldest

# The child: the package's modules without its __init__ (which imports every face of Camillo).
_BOOT = ("import sys, types\n"
         "package = types.ModuleType('camillo')\n"
         "package.__path__ = [sys.argv[1]]\n"
         "sys.modules['camillo'] = package\n"
         "from camillo.recordcheck import serve\n"
         "serve(sys.stdin.buffer, sys.stdout.buffer)\n")


class CheckerGone(Exception):
    """The child process is gone (it could not start, or it died): check in this process."""


Ticket = tuple[int, int, int]  # (frame, first batch in the frame, batches)


class RecordChecker:
    """A child process checking records, frame by frame, in the order they were added."""

    def __init__(self) -> None:
        flags = ["-I"] + (["-B"] if sys.dont_write_bytecode else [])
        package = os.path.dirname(os.path.abspath(__file__))
        no_window = getattr(subprocess, "CREATE_NO_WINDOW", 0)  # (Windows: no console for the child of the app)
        self._proc = subprocess.Popen(  # this interpreter, running this package's own code
            [sys.executable, *flags, "-c", _BOOT, package],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            creationflags=no_window)
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._cond = threading.Condition()
        self._ready = self._gone = False
        self._answers: dict[int, bytes] = {}
        self._read: dict[int, list[list[Fields] | None]] = {}  # the last frame answered, read
        self._sent = 0  # frames handed to the sender
        self._parts: list[bytes] = []  # the frame being filled
        self._batches = self._records = 0  # in it
        for target in (self._send_loop, self._receive_loop):
            threading.Thread(target=target, name="camillo-recordcheck", daemon=True).start()

    @property
    def ready(self) -> bool:
        """The child has started and is alive: records added now are checked there."""
        return self._ready and not self._gone

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child to be ready (tests; a read never waits)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._gone, timeout)
            return self.ready

    def add(self, batches: Sequence[Batch]) -> Ticket:
        """Queue the records of ``batches`` (erased ones are not sent); their verdicts by :meth:`verdicts`."""
        parts = self._parts
        for batch in batches:
            records = [(rid, raw) for rid, raw in zip(batch.header.records, batch.records) if raw is not None]
            parts.append(_U32.pack(len(records)))
            for rid, raw in records:
                parts += (rid, _U32.pack(len(raw)), raw)
            self._records += len(records)
        ticket = (self._sent, self._batches, len(batches))
        self._batches += len(batches)
        if self._records >= FRAME_RECORDS:
            self._send()
        return ticket

    def due(self, ticket: Ticket) -> bool:
        """Time to take the verdicts of ``ticket`` (the oldest the reader holds): they are here, the
        child is gone, or :data:`DEPTH` frames were sent after it (the reader waits then, so that
        the batches it holds stay few)."""
        with self._cond:
            return ticket[0] in self._answers or self._gone or self._sent - ticket[0] > DEPTH

    def verdicts(self, ticket: Ticket) -> list[list[Fields] | None]:
        """For each batch of ``ticket``, None when a record of it did not check, else the fields of its
        records (those sent: not the erased ones), waiting for the child if need be.  Raises
        :class:`CheckerGone` when the child is gone before answering."""
        frame, first, count = ticket
        if frame == self._sent:
            self._send()
        with self._cond:
            while frame not in self._answers and not self._gone:
                self._cond.wait()
            answer = self._answers.get(frame)
            if answer is None:
                raise CheckerGone
            for old in [f for f in self._answers if f < frame]:  # (asked in order: the older ones are done)
                del self._answers[old]
            if frame not in self._read:
                self._read = {frame: _answer(answer)}  # (read once: a frame holds several segments' batches)
            batches = self._read[frame]
        if len(batches) < first + count:
            raise CheckerGone  # (not what this frame asked: checked here)
        return batches[first:first + count]

    def close(self) -> None:
        """End the child (it exits when its input closes) and wait for it."""
        self._outbox.put(None)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def __enter__(self) -> RecordChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ the pipe

    def _send(self) -> None:
        if not self._batches:
            return
        body = b"".join([_U32.pack(self._batches), *self._parts])
        self._outbox.put(_U32.pack(len(body)) + body)
        self._sent += 1
        self._parts, self._batches, self._records = [], 0, 0

    def _send_loop(self) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        try:
            while (frame := self._outbox.get()) is not None:
                pipe.write(frame)
                pipe.flush()
        except OSError:  # (the child died: the receiver says so)
            pass
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def _receive_loop(self) -> None:
        pipe = self._proc.stdout
        assert pipe is not None
        frame = 0
        try:
            if pipe.read(1) != b"R":
                return
            with self._cond:
                self._ready = True
                self._cond.notify_all()
            while len(head := pipe.read(4)) == 4:
                (count,) = _U32.unpack(head)
                answer = pipe.read(count)
                if len(answer) != count:
                    return
                with self._cond:
                    self._answers[frame] = answer
                    self._cond.notify_all()
                frame += 1
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._gone = True
                self._cond.notify_all()


def check_frame(body: bytes) -> list[list[Fields] | None]:
    """The verdicts of one frame: per batch, None when a record of it did not decode and check, else
    the fields of each of its records (:func:`~camillo.rowfields.record_fields`)."""
    view = memoryview(body)
    (batches,), at = _U32.unpack_from(view, 0), 4
    out: list[list[Fields] | None] = []
    for _b in range(batches):
        (records,), at = _U32.unpack_from(view, at), at + 4
        fields: list[Fields] | None = []
        for _ in range(records):
            rid = bytes(view[at:at + 32])
            (size,) = _U32.unpack_from(view, at + 32)
            raw = bytes(view[at + 36:at + 36 + size])
            at += 36 + size
            if fields is not None:
                try:
                    fields.append(record_fields(decode_record(raw, expected_id=rid).fields))
                except Exception:  # a VaultError, or anything else: the reader's own decode says what
                    fields = None
        out.append(fields)
    return out


def _answer(data: bytes) -> list[list[Fields] | None]:
    """A frame's answer as :func:`check_frame` gave it (anything else: the child is not answering)."""
    try:
        answer = marshal.loads(data)  # noqa: S302 - this installation's own child (module docstring)
    except (EOFError, ValueError, TypeError):
        raise CheckerGone from None
    if type(answer) is not list:
        raise CheckerGone
    return answer


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The child's loop: a verdict frame for each frame read, until the input closes."""
    out.write(b"R")
    out.flush()
    while len(head := inp.read(4)) == 4:
        (size,) = _U32.unpack(head)
        body = inp.read(size)
        if len(body) != size:
            return
        answer = marshal.dumps(check_frame(body))
        out.write(_U32.pack(len(answer)) + answer)
        out.flush()


def start() -> RecordChecker | None:
    """A checker, or None when no child process can be started here (the reader checks itself): in
    an app frozen into one executable, ``sys.executable`` is the app itself, not an interpreter."""
    if getattr(sys, "frozen", False):
        return None
    try:
        return RecordChecker()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
