"""Object stores: a vault that lives in S3-compatible storage, read and written through a local
mirror (spec §4.7; docs/storage.md).

A vault at ``s3://bucket/prefix`` keeps the folder layout of spec §4.1 under that key prefix: the
object ``prefix/segments/ab/ab….seg`` is the file ``segments/ab/ab….seg``.  The endpoint comes from
the location itself (``s3://bucket/prefix?endpoint=https://…``, what the desktop remembers), else
``CAMILLO_S3_ENDPOINT``, else the AWS configuration (``AWS_ENDPOINT_URL``, ``~/.aws/config``; AWS S3
when none is set).  Credentials: keys this installation kept in the OS keychain for that endpoint
and bucket (:func:`remember_object_store_keys`; the desktop keeps them there, never in a settings file), else the
standard AWS chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``,
``~/.aws/credentials`` …).

:class:`ObjectShelf` is a :class:`~camillo.storage.FolderShelf` over a **mirror**: a folder in this
installation's local state holding the objects it has seen.  Listing the shelf lists the bucket
(paginated), downloads what the mirror lacks (parallel GETs, each checked against its listed size
and, for content-addressed names, its hash) and drops what the store no longer has, then lists the
mirror as a folder; reading reads the mirror.  Writing stages the file in the mirror like a folder
write, then ``commit`` uploads it with a conditional PUT (``If-None-Match: *``: nothing is ever
overwritten; an object already there with the same bytes is success, with other bytes a refusal)
and only then renames it into place locally.  Before a plain append persists its batch, only ``env/``
is listed (:meth:`ObjectShelf.start_key_check`, while the batch is numbered and sealed); the whole
bucket is listed again when it changed.  Throttling and 5xx answers are retried with backoff
(exponential backoff with jitter); truncated bodies are retried, then left "still syncing".

The client library is botocore (see docs/storage.md for why): imported only when an object store
is opened, one client per endpoint and keys kept for the process (clients are thread-safe).  An
append's listing of ``env/`` and its PUT go out as URLs that client signs (camillo.s3direct), and
through the client itself whenever that path does not get the answer it expects.

A shelf is confined to the thread that uses the vault; its pools' threads only list the store, fetch
objects and write them into the mirror.
"""

from __future__ import annotations

import base64
import builtins
import concurrent.futures
import contextlib
import datetime
import hashlib
import json
import math
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from . import descriptor, keychain, storepacks
from .errors import (
    DamagedFile,
    KeychainError,
    NotAVault,
    StorageError,
    UsageError,
    VaultError,
    WrongCredential,
)
from .localstate import data_root
from .names import kind_of
from .packshelf import PackShelf, open_shelf
from .s3direct import DirectRequests
from .s3listing import lean_listing, timestamp
from .s3location import ENDPOINT_ENV as ENDPOINT_ENV  # re-exported
from .s3location import SCHEME as SCHEME  # re-exported
from .s3location import StoreLocation as StoreLocation  # re-exported
from .s3location import is_object_store as is_object_store  # re-exported
from .s3location import object_store_url as object_store_url  # re-exported
from .s3location import with_endpoint as with_endpoint  # re-exported
from .storage import (
    DIRECTORIES,
    FolderShelf,
    content_hash_of,
    hash_matches,
    make_dirs_durable,
)
from .storepacks import StorePacks

KEYCHAIN_SERVICE = "camillo-s3"

# The largest object each kind of file can be (spec §4.7): a listing that claims more is refused
# before anything is downloaded, and a download is cut off one byte past it.
MAX_BYTES = {
    "descriptor": 1024,
    "slot": 1 << 20,
    "envelope": 1 << 20,
    "enroll": 1 << 20,
    "segment": 16 << 20,  # a payload of at most ~8.1 MiB (spec §9.1), sealed and padded
    "pack": 4 << 30,
}
DOWNLOADERS = 16  # parallel GETs while the mirror catches up
LIST_PAGE = 1000  # keys asked for per listing page (S3's maximum)
LIST_REUSE = 1.0  # seconds a listing answers list() (not changes()); an open lists the store once
ATTEMPTS = 6  # tries of one request
RETRY_BASE = 0.2  # seconds before the second try; doubled for each further one, with jitter (at most ~6 s in all)
TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                   "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests"}
BODY_ATTEMPTS = 3  # tries of a download whose body came back cut short


# ---------------------------------------------------------------------------------- keys


def _keychain_user(loc: StoreLocation) -> str:
    return f"{loc.effective_endpoint() or 'aws'}|{loc.bucket}"


def remember_object_store_keys(location: str, access_key_id: str, secret_access_key: str) -> None:
    """Keep an access key for this location's endpoint and bucket in the OS keychain (never in a
    file): later opens of any vault in that bucket use it.  KeychainError when no keychain can."""
    loc = StoreLocation.parse(location)
    if not access_key_id.strip() or not secret_access_key:
        raise UsageError("give both the access key id and the secret access key")
    value = base64.b64encode(json.dumps({"id": access_key_id.strip(), "secret": secret_access_key}).encode()).decode()
    keychain.store_secret(KEYCHAIN_SERVICE, _keychain_user(loc), value, "object-store keys")
    _forget_clients()


def forget_object_store_keys(location: str) -> None:
    """Remove the keys :func:`remember_object_store_keys` kept for this location's endpoint and bucket."""
    keychain.delete_secret(KEYCHAIN_SERVICE, _keychain_user(StoreLocation.parse(location)), "object-store keys")
    _forget_clients()


def object_store_keys_kept(location: str) -> bool:
    """Does the OS keychain hold keys for this location's endpoint and bucket?"""
    try:
        return _kept_keys(StoreLocation.parse(location)) is not None
    except VaultError:
        return False


def _kept_keys(loc: StoreLocation) -> tuple[str, str] | None:
    try:
        value = keychain.load_secret(KEYCHAIN_SERVICE, _keychain_user(loc), "object-store keys")
    except KeychainError:
        return None
    if value is None:
        return None
    try:
        m = json.loads(base64.b64decode(value, validate=True))
        return str(m["id"]), str(m["secret"])
    except Exception:
        raise KeychainError(f"the keychain entry with the keys for {loc.display} is damaged; enter the keys "
                            "again") from None


# ---------------------------------------------------------------------------------- the client

_clients: dict[tuple[str | None, str | None, str | None, bytes], Any] = {}
_clients_lock = threading.Lock()


def _forget_clients() -> None:
    with _clients_lock:
        _clients.clear()


def _client(loc: StoreLocation) -> Any:
    try:
        import botocore.session
        from botocore.config import Config
    except ImportError:  # pragma: no cover - botocore is a dependency
        raise StorageError("opening a vault in an object store needs the botocore package; install it "
                           "(pip install botocore)") from None
    endpoint = loc.effective_endpoint()
    keys = _kept_keys(loc)
    # the keys botocore would find in the environment are part of what a client is for
    env = "\0".join(os.environ.get(v, "") for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                                    "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"))
    cache_key = (endpoint, loc.region, keys[0] if keys else None,
                 hashlib.sha256((keys[1] if keys else "").encode() + b"\0" + env.encode()).digest())
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is not None:
            return client
        session = botocore.session.get_session()
        # botocore parses every timestamp with dateutil (about 0.6 ms each): a listing of 1,000 objects
        # would spend most of its time there
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=timestamp)
        region = loc.region or session.get_config_variable("region") or "us-east-1"
        config = Config(
            retries={"mode": "standard", "total_max_attempts": 1},  # retried by ObjectShelf._call
            connect_timeout=5, read_timeout=30, max_pool_connections=DOWNLOADERS * 2,
            s3={"addressing_style": "path" if endpoint else "auto"},
            # the integrity of every object is checked by its name or its own checksum; the newer
            # default checksums are refused by several S3-compatible servers
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
            user_agent_extra="camillo", signature_version="s3v4",  # also for presigned URLs (camillo.s3direct)
        )
        extra = {"aws_access_key_id": keys[0], "aws_secret_access_key": keys[1]} if keys else {}
        try:
            client = session.create_client("s3", endpoint_url=endpoint, region_name=region, config=config, **extra)
        except ValueError as exc:
            raise UsageError(f"the endpoint for {loc.display} is not a usable URL ({exc}); check --endpoint-url "
                             f"or {ENDPOINT_ENV}") from None
        client.meta.events.register("before-parse.s3.ListObjectsV2", lean_listing)
        _clients[cache_key] = client
        return client


def _ca_bundle() -> str | None:
    """The CA bundle botocore verifies TLS with when the user names one (AWS_CA_BUNDLE, or
    ca_bundle in the AWS config file)."""
    import botocore.session

    found = os.environ.get("AWS_CA_BUNDLE") or botocore.session.get_session().get_config_variable("ca_bundle")
    return str(found) if found else None


def _backoff(attempt: int) -> None:
    time.sleep(RETRY_BASE * (2 ** attempt) * (0.5 + random.random() / 2))  # noqa: S311 - jitter, not a secret


def _status(exc: Any) -> tuple[int, str]:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return status, code


CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
                    "ExpiredToken", "InvalidClientTokenId", "AuthorizationHeaderMalformed", "Forbidden", "403"}


def _failure(loc: StoreLocation, exc: BaseException, doing: str) -> VaultError:
    """One clear error, naming the vault's location and what to do, for a failed request."""
    import botocore.exceptions as bx

    where = loc.where()
    if isinstance(exc, VaultError):
        return exc
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return WrongCredential(f"no keys to reach {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                               "AWS_PROFILE), or keep keys for it in the keychain with the desktop's Open object "
                               "storage…; nothing was written")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError):
        return StorageError(f"cannot reach the object store for {where} while trying to {doing}: check the "
                            f"endpoint (--endpoint-url or {ENDPOINT_ENV}) and the network; nothing was written")
    if isinstance(exc, bx.ClientError):
        status, code = _status(exc)
        if code in CREDENTIAL_CODES or status == 403:
            return WrongCredential(f"the object store refused the keys for {where} ({code or status}) while trying "
                                   f"to {doing}: check the access key id and secret (and that they may use bucket "
                                   f"{loc.bucket}); nothing was written")
        if code in ("NoSuchBucket", "404") or (status == 404 and doing == "open the bucket"):
            return NotAVault(f"bucket {loc.bucket} does not exist at {loc.effective_endpoint() or 'AWS S3'} "
                             f"({loc.display}): create it with your provider's console or tools (Camillo never "
                             "creates buckets), or correct the name; nothing was written")
        if status in (500, 502, 503, 504) or code in ("SlowDown", "ServiceUnavailable", "InternalError"):
            return StorageError(f"the object store holding {where} kept answering {status or code} ({code or 'busy'}) "
                                f"after {ATTEMPTS} tries while trying to {doing}; nothing acknowledged was lost: try "
                                "again later")
        return StorageError(f"the object store holding {where} refused to {doing} ({status} {code}); check the "
                            "endpoint, the bucket and its settings (docs/storage.md)")
    if isinstance(exc, bx.BotoCoreError):
        return StorageError(f"the object store for {where} did not answer like an S3 server while trying to "
                            f"{doing} ({type(exc).__name__}): check the endpoint; nothing was written")
    return StorageError(f"cannot {doing} in {where} ({type(exc).__name__}: {exc})")


# ---------------------------------------------------------------------------------- the shelf


def mirror_dir(loc: StoreLocation, home: str | None = None) -> str:
    """This installation's mirror of the vault at ``loc`` (in its local state, not its cache: it
    holds writes staged before their upload)."""
    ident = hashlib.sha256("\0".join((loc.effective_endpoint() or "aws", loc.bucket, loc.prefix)).encode())
    return os.path.join(data_root(home), "mirrors", ident.hexdigest()[:32])


@dataclass(frozen=True)
class RemoteObject:
    """One vault object as the store lists it (what its host sees, with the name)."""

    size: int
    etag: str
    modified: float  # POSIX seconds


class ObjectShelf(FolderShelf):
    """A vault in an object store, through a local mirror (module docstring)."""

    kind = "object store"
    packs_hashed_on_open = False  # checked against its name when downloaded; each segment when read
    lazy_listing = False  # every pull compares the mirror's names with the store's listing

    def __init__(self, location: str, *, create: bool = False, home: str | None = None) -> None:
        self.store = StoreLocation.parse(location)
        self.client = _client(self.store)
        self.remote: dict[str, RemoteObject] = {}  # the last listing's vault objects
        self.others = 0  # objects under the prefix that are not vault files (ignored, spec §4.3)
        self.pending: set[str] = set()  # listed but not (yet) downloaded whole: still syncing
        self.lagging: set[str] = set()  # held, missing from the last listing, but still there (HEAD)
        self.requests = 0
        self._no_batch_delete = False  # the store refused a DeleteObjects request
        self._checker: concurrent.futures.ThreadPoolExecutor | None = None  # start_key_check's listing
        endpoint = self.store.effective_endpoint() or self.client.meta.endpoint_url
        self._direct = DirectRequests(self.client, self.store.bucket, _ca_bundle()) if DirectRequests.usable(
            endpoint) else None  # an append's two requests without botocore's pipeline (camillo.s3direct)
        self._pulling = False
        self._pulled_at: float | None = None  # time.monotonic() of the last pull
        self._first_changes = True
        self._bucket_checked()
        root = mirror_dir(self.store, home)
        found = None
        if create:
            listing = self._list_remote()
            if any(kind_of(n) for n in listing):
                raise StorageError(f"{self.store.where()} already holds a vault; choose an empty bucket or prefix")
            self._check_conditional_writes()
        else:
            found = self._remote_descriptor()  # before anything is written locally
        if create:
            shutil.rmtree(root, ignore_errors=True)  # a mirror of an earlier vault at this place
        try:
            make_dirs_durable(root, *(os.path.join(root, d) for d in DIRECTORIES), mode=0o700)
        except OSError as exc:
            raise StorageError(f"cannot create the local mirror {root} of {self.store.display}: {exc.strerror}") from None
        super().__init__(root)
        self.location = self.store.url  # what a face remembers to open it again (no secret in it)
        self.writable = True
        self.packs = StorePacks(self)
        if found is not None:
            self._adopt_descriptor(found)

    # -- requests

    def _call(self, doing: str, fn: Any, *, quiet: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One request, tried again with exponential backoff and jitter on throttling, 5xx answers
        and dropped connections (ATTEMPTS in all).  An answer whose HTTP status is in ``quiet`` is
        returned as that number instead of raising (a 404 that only says "not there", a 412 that
        says "already there")."""
        import botocore.exceptions as bx

        for attempt in range(ATTEMPTS):
            last = attempt + 1 == ATTEMPTS
            self.requests += 1
            try:
                return fn(Bucket=self.store.bucket, **kwargs)
            except bx.ClientError as exc:
                status, code = _status(exc)
                if status in quiet:
                    return status
                if 409 in quiet and code == "ConditionalRequestConflict":
                    return 409
                if (status >= 500 or code in TRANSIENT_CODES) and not last:
                    _backoff(attempt)
                    continue
                raise _failure(self.store, exc, doing) from None
            except (bx.ConnectionClosedError, bx.ReadTimeoutError, bx.ResponseStreamingError) as exc:
                if not last:
                    _backoff(attempt)
                    continue
                raise _failure(self.store, exc, doing) from None
            except Exception as exc:
                raise _failure(self.store, exc, doing) from None
        raise AssertionError("unreachable")

    def _bucket_checked(self) -> None:
        """The bucket exists and these keys may list the vault's prefix: a one-key listing rather
        than HeadBucket, which keys limited to a prefix (docs/storage.md's policy) may not make."""
        self._call("open the bucket", self.client.list_objects_v2, Prefix=self.store.key_prefix, MaxKeys=1)

    def _check_conditional_writes(self) -> None:
        """Before a vault is created: the store must refuse a second conditional PUT of one key.
        A store that ignores ``If-None-Match`` would let one device overwrite another's files
        (spec §4.7.1), so no vault is made there.  The probe key is not a vault name (ignored)."""
        key = self.store.key(f".camillo-probe-{os.urandom(8).hex()}")
        first = self._call("test conditional writes", self.client.put_object, quiet=(412, 501), Key=key, Body=b"1",
                           IfNoneMatch="*")
        second = self._call("test conditional writes", self.client.put_object, quiet=(412, 501), Key=key, Body=b"2",
                            IfNoneMatch="*") if first not in (412, 501) else first
        self._call("test conditional writes", self.client.delete_object, Key=key)
        if second != 412:
            raise StorageError(f"the object store holding {self.store.where()} does not honour conditional writes "
                               "(If-None-Match: *), which Camillo needs so that no device ever overwrites another's "
                               "files: no vault was created; see docs/storage.md for providers that do")

    def _remote_descriptor(self) -> bytes:
        """The store's VMEM object; NotAVault, naming what is there instead, when there is none."""
        data = self._get(descriptor.NAME)
        if data is None:
            listing = self._list_remote()
            held = f"it holds {self.others} other object{'s' if self.others != 1 else ''} under that prefix" \
                if self.others else "nothing is stored under that prefix"
            if listing:
                held = "it holds vault files but no VMEM descriptor (an unfinished creation, or still syncing)"
            raise NotAVault(f"{self.store.where()} is not a VMEM vault ({held}): check the bucket and prefix, or "
                            f"create a vault there with 'camillo init {self.store.display}'")
        descriptor.decode(data)
        return data

    def _adopt_descriptor(self, data: bytes) -> None:
        """A mirror of another vault that lived at this place before is emptied first."""
        mine = self._local_bytes(descriptor.NAME)
        if mine is not None and mine != data:
            for name in FolderShelf.walk(self):
                self.drop_from_mirror(name)
        if mine != data:
            self.keep_in_mirror(descriptor.NAME, data)

    def _list_remote(self, under: str = "") -> dict[str, RemoteObject]:
        """Every vault object under the prefix, or only those in the vault directory ``under``
        (``"env/"``) (all pages; the order the store lists them in does not matter).  An object
        larger than its kind can be is refused here, before any download."""
        found: dict[str, RemoteObject] = {}
        others = 0
        prefix = self.store.key_prefix
        for contents in self._pages(prefix + under, direct=bool(under)):
            for key, size, etag, modified in contents:
                name = key[len(prefix):] if key.startswith(prefix) else ""
                kind = kind_of(name)
                if kind is None:
                    others += 1
                    continue
                self._check_size(name, kind, int(size))
                when = timestamp(modified) if isinstance(modified, str) and modified else modified
                found[name] = RemoteObject(int(size), str(etag).strip('"'),
                                           when.timestamp() if isinstance(when, datetime.datetime) else 0.0)
        if not under:
            self.others = others
        return found

    def _pages(self, key_prefix: str, *, direct: bool) -> Iterator[list[Any]]:
        """The listing of ``key_prefix``, page by page, as (key, size, ETag, LastModified) rows: one
        presigned request when ``direct`` and it answers with the whole listing (camillo.s3direct),
        else through botocore."""
        if direct and self._direct is not None:
            self.requests += 1
            rows = self._direct.list_page(key_prefix)
            if rows is not None:
                yield rows
                return
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Prefix": key_prefix, "MaxKeys": LIST_PAGE}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("list the vault's objects", self.client.list_objects_v2, **kwargs)
            contents = page.get("CamilloContents")
            if contents is None:  # botocore parsed the page itself
                contents = [(o["Key"], o.get("Size", 0), o.get("ETag", ""), o.get("LastModified"))
                            for o in page.get("Contents", [])]
            yield contents
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                return

    def _check_size(self, name: str, kind: str, size: int) -> None:
        limit = MAX_BYTES[kind]
        if size > limit:
            raise StorageError(
                f"{self.store.display}/{name} is {_human(size)}, larger than any VMEM {kind} can be (at most "
                f"{_human(limit)}): it is not part of this vault and was not downloaded; remove that object from the "
                "bucket, then open the vault again", file=name)

    def _get(self, name: str) -> bytes | None:
        """The object's bytes (None when it does not exist), at most its kind's size; a body cut
        short is asked for again, then returned as it came (the caller checks it)."""
        kind = kind_of(name) or "segment"
        limit = MAX_BYTES[kind]
        import botocore.exceptions as bx
        import urllib3.exceptions

        data = b""
        for attempt in range(BODY_ATTEMPTS):
            response = self._call(f"read {name}", self.client.get_object, quiet=(404,), Key=self.store.key(name))
            if response == 404:
                return None
            length = int(response.get("ContentLength") or 0)
            self._check_size(name, kind, length)
            body = response["Body"]
            try:
                data = bytes(body.read(limit + 1))
            except (bx.IncompleteReadError, bx.ResponseStreamingError, bx.ReadTimeoutError,
                    urllib3.exceptions.HTTPError, OSError):
                time.sleep(0.05 * (attempt + 1))
                continue
            finally:
                body.close()
            self._check_size(name, kind, len(data))
            if length and len(data) != length:
                time.sleep(0.05 * (attempt + 1))
                continue
            return data
        return data

    def still_there(self, name: str) -> bool:
        answer = self._call(f"look for {name}", self.client.head_object, quiet=(404,), Key=self.store.key(name))
        return bool(answer != 404)

    def open_object(self, name: str) -> Any:
        """A streaming body of the whole object (``read(n)``, ``close()``), or None when it does not
        exist."""
        answer = self._call(f"read {name}", self.client.get_object, quiet=(404,), Key=self.store.key(name))
        return None if answer == 404 else answer["Body"]

    def delete_object(self, name: str) -> None:
        """Delete one object from the store (the mirror is not touched)."""
        self._call(f"delete {name}", self.client.delete_object, Key=self.store.key(name))

    def delete_objects(self, names: Iterable[str]) -> None:
        """Delete objects from the store (the mirror is not touched): DeleteObjects, 1,000 keys a
        request; one by one on a store that does not offer it."""
        names = sorted(names)
        for i in range(0, len(names), LIST_PAGE):
            chunk = names[i:i + LIST_PAGE]
            if len(chunk) > 1 and not self._no_batch_delete:
                answer = self._call("delete objects", self.client.delete_objects, quiet=(400, 501),
                                    Delete={"Objects": [{"Key": self.store.key(n)} for n in chunk], "Quiet": True})
                if answer not in (400, 501):
                    chunk = sorted({e["Key"][len(self.store.key_prefix):] for e in answer.get("Errors", [])})
                else:
                    self._no_batch_delete = True
            for name in chunk:
                self.delete_object(name)
        for name in names:
            self.remote.pop(name, None)

    def put_new(self, name: str, data: bytes) -> bool:
        """Create the object unless it exists (``If-None-Match: *``).  False when it already held
        exactly these bytes; StorageError when it holds others (nothing is ever overwritten)."""
        for attempt in range(ATTEMPTS):
            direct = self._direct.put_if_absent(self.store.key(name), data) if self._direct and not attempt else None
            self.requests += direct is not None
            answer = direct or self._call(f"write {name}", self.client.put_object, quiet=(409, 412, 501),
                                          Key=self.store.key(name), Body=data, IfNoneMatch="*")
            if answer == 409:  # a concurrent conditional write of this name: ask again
                time.sleep(0.05 * (attempt + 1))
                continue
            if answer == 412:
                there = self._get(name)
                if there == data:
                    return False
                if there is not None and content_hash_of(name) is not None and hash_matches(name, there) is False:
                    raise StorageError(f"{self.store.display}/{name} exists but does not match its name (a damaged "
                                       "or partly written object): delete that object so it can be written again; "
                                       "the vault is unchanged", file=name)
                raise StorageError(f"{name} already exists in {self.store.display} with different content; refusing "
                                   "to overwrite", file=name)
            if answer == 501:
                raise StorageError(f"the object store holding {self.store.where()} does not support conditional "
                                   "writes (If-None-Match: *), which Camillo needs so that no device ever overwrites "
                                   "another's files: see docs/storage.md for providers that do", file=name)
            return True
        raise StorageError(f"{name} could not be written to {self.store.where()}: another writer kept writing the "
                           "same name at the same moment; try again", file=name)

    # -- the mirror

    def _local_bytes(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def keep_in_mirror(self, name: str, data: bytes) -> None:
        """Put a downloaded object into the mirror.  A name not checked by its hash is written like
        a folder write (temp file, fsync, rename); a content-addressed one straight under its name,
        unsynced (a torn copy, after a crash or while another process reads, does not match its
        name when read, and is downloaded again): a first open writes thousands of them."""
        if content_hash_of(name) is None:
            tmp = FolderShelf.stage(self, name, data)
            if tmp is not None:
                FolderShelf.commit(self, name, tmp)
            return
        path = self._path(name)
        try:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot write the local mirror of {self.store.display} ({exc.strerror}): free some "
                               "space (or set CAMILLO_HOME elsewhere) and try again") from None

    def drop_from_mirror(self, name: str) -> None:
        """Remove a file from the mirror (a pack stops being read at once)."""
        self.packs.note_dropped(name)
        if kind_of(name) == "pack":
            self.forget_pack(name)
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot update the local mirror of {self.store.display}: {exc.strerror}") from None

    def mirror_packs(self) -> dict[str, frozenset[str]]:
        """The packs in the mirror, each with the segments it holds (the mirror listed now)."""
        self.scan_folder()
        return self.packs_here()

    def _download(self, name: str, listed: RemoteObject | None) -> tuple[bytes, bool] | None:
        """Fetch one object (None: the store does not have it) and whether it came whole (its
        listed size, its hash); into the mirror when it did."""
        data = self._get(name)
        if data is None:
            return None
        whole = (listed is None or len(data) == listed.size) and hash_matches(name, data) is not False
        if whole:
            self.keep_in_mirror(name, data)
        return data, whole

    def pull(self) -> None:
        """Bring the mirror to what the store lists now: download the packs and loose objects it
        lacks (in parallel), drop what the store no longer has.  A name the listing omits but the
        store still serves (a listing that lags behind writes) is kept."""
        listing = self._list_remote()
        self.scan_folder()
        have = set(self._loose)
        self.remote = listing
        unfetched = self._fetch_packs(listing)
        covered = self._covered_by_packs(listing)
        missing = sorted(n for n in listing if n not in have and kind_of(n) != "pack" and n not in covered)
        pending: set[str] = set()
        if missing:
            def fetch(name: str) -> bool:  # True: it came cut short or altered (syncing); the bytes are not kept
                got = self._download(name, listing[name])
                return got is not None and not got[1]

            with concurrent.futures.ThreadPoolExecutor(min(DOWNLOADERS, len(missing))) as pool:
                pending = {name for name, partial in zip(missing, pool.map(fetch, missing)) if partial}
            for name in missing:
                if name not in pending:
                    self.packs.note_written(name)
        gone = sorted(n for n in have if n not in listing)
        if gone:  # a pack written after the listing passed packs/ may hold what it no longer lists loose
            later = {n: o for n, o in self._list_remote("packs/").items() if n not in listing}
            listing.update(later)
            unfetched |= self._fetch_packs(later)
            covered = self._covered_by_packs(listing)
            gone = [n for n in gone if n not in listing]
        lagging: set[str] = set()
        replaced = {n for n in gone if n in covered and self.packs.copy_in_pack_is_good(n)}
        for name in sorted(replaced):
            self.drop_from_mirror(name)  # a loose copy the store replaced by a pack
        gone = [n for n in gone if n not in replaced]
        if gone and unfetched:
            lagging = {n for n in gone if kind_of(n) != "pack"}  # a pack not fetched yet may hold them
            gone = [n for n in gone if n not in lagging]
        if gone:
            with concurrent.futures.ThreadPoolExecutor(min(DOWNLOADERS, len(gone))) as pool:
                still = dict(zip(gone, pool.map(self.still_there, gone)))
            for name in gone:
                if still[name]:
                    lagging.add(name)
                else:
                    self.drop_from_mirror(name)
        self.pending, self.lagging = pending, lagging

    def _fetch_packs(self, listing: dict[str, RemoteObject]) -> set[str]:
        """Download the listed packs the mirror does not hold readable; those that could not be."""
        held = self.packs_here()
        return self.packs.fetch(n for n in listing if kind_of(n) == "pack" and n not in held
                                and n not in self.packs.refused)

    def _covered_by_packs(self, listing: dict[str, RemoteObject]) -> set[str]:
        """The segments the mirror's packs that ``listing`` holds hold (the mirror listed now)."""
        self.scan_folder()
        return {n for p, held in self.packs_here().items() if p in listing for n in held}

    # -- the shelf's calls

    def _scan(self, *, reuse: float = 0.0) -> None:
        """Pull (unless the last pull is younger than ``reuse`` seconds), then list the mirror."""
        was_pending = set(self.pending)
        fresh = self._pulled_at is not None and time.monotonic() - self._pulled_at < reuse
        if not self._pulling and not fresh:
            self._pulling = True
            try:
                self.pull()
            finally:
                self._pulling = False
            self._pulled_at = time.monotonic()
        self.scan_folder()
        for name in self.pending:
            self._gain(name)
        for name in was_pending - self.pending:
            if name not in self._loose and name not in self._packed:
                self._lose(name)

    def start_key_check(self, scanned_at: float, age: float) -> Callable[[], bool] | None:
        """As :meth:`FolderShelf.start_key_check`, whatever the scan's age: whether the store lists
        exactly the envelopes the mirror holds (one small listing, where a full one grows with the
        vault), listed on a worker thread so that the writer numbers, seals and stages its batch
        meanwhile (spec §4.7.1 writer rule 7: nothing is persisted or uploaded before the answer; on
        "no" the writer forgets that numbering).  Every key change that would make an append seal to
        keys a revoked or replaced credential still opens writes envelopes (spec §16.4, §16.6), so
        ``env/`` alone shows it; slots without envelopes (a device registered, a credential added),
        like other writers' batches, arrive with the next refresh."""
        if self.key_files_unread():
            return None
        if self._checker is None:
            self._checker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="camillo-keycheck")
        listing = self._checker.submit(self._list_remote, "env/")
        return lambda: set(listing.result()) == self.files_in("env")

    def list(self) -> builtins.list[str]:
        """Every vault name, from a listing of the store made now or less than LIST_REUSE ago."""
        self._scan(reuse=LIST_REUSE)
        return sorted(self._names)

    def changes(self) -> tuple[set[str], set[str], set[str]]:
        """As :meth:`FolderShelf.changes`, from a listing of the store made now (the first call after
        opening uses the listing the open made to find the slots, however long unlocking took)."""
        self._scan(reuse=math.inf if self._first_changes else 0.0)
        self._first_changes = False
        added, removed = self._added, self._removed
        self._added, self._removed = set(), set()
        return self._names, added, removed

    def files_in(self, directory: str) -> frozenset[str]:
        """As of the last listing of the store (the mirror's folder, no request)."""
        if not self.unchanged(directory):
            self.scan_folder()
        entry = self._dirs.get(directory)
        return entry[1] if entry is not None else frozenset()

    def exists(self, name: str) -> bool:
        return super().exists(name) or self.still_there(name)

    def read(self, name: str) -> bytes:
        """The file's bytes from the mirror, checked against its name; a torn mirror copy (a loose
        file or a pack) is downloaded again."""
        for _ in range(3):
            try:
                data = super().read(name)
            except FileNotFoundError:
                break
            except DamagedFile:
                data = b""
            if hash_matches(name, data) is not False:
                return data
            if os.path.exists(self._path(name)):
                self.drop_from_mirror(name)  # a torn loose copy: a pack may hold it too
                continue
            pack = self.pack_holding(name)
            if pack is None:
                break
            self.drop_from_mirror(pack)
            if pack in self.packs.fetched_again:  # not what it says, twice: forged, or damaged on the store
                self.packs.refused.add(pack)
            else:  # a torn mirror copy: download it again
                self.packs.fetched_again.add(pack)
                self.packs.fetch([pack])
            self.scan_folder()
        fetched = self._download(name, self.remote.get(name))
        if fetched is None:
            raise FileNotFoundError(name)
        return fetched[0]

    def commit(self, name: str, tmp: str, *, sync: bool = True) -> bool:
        """Upload the staged file (a conditional PUT), then rename it into place in the mirror
        (``sync`` does not apply: the PUT is what makes the file durable).
        On failure the staged file stays for a later commit, as in a folder."""
        path = self._path(name)
        staged = os.path.join(os.path.dirname(path), tmp)
        if os.path.exists(path):
            self.unstage(name, tmp)
            return False
        try:
            with open(staged, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot read the staged {name} in the local mirror: {exc.strerror}", file=name) from None
        self.put_new(name, data)
        # the store holds the durable copy now: the mirror's rename needs no fsync (lost in a crash, the
        # file is downloaded again, and the staged copy left behind is a dot file readers ignore)
        FolderShelf.commit(self, name, tmp, sync=False)
        self.packs.note_written(name)
        return True

    def delete(self, name: str) -> None:
        self.delete_all([name])

    def delete_all(self, names: Iterable[str]) -> None:
        """Delete vault files (spec §4.5): the packs holding any of them are replaced first by packs
        of their other segments (camillo.storepacks), then the loose objects are deleted."""
        names = [n for n in names if self._path(n)]  # vault names only, checked before anything is deleted
        self.packs.delete_segments(set(names))
        self.delete_objects(names)
        with self._directories_synced_at_the_end():
            for name in names:
                FolderShelf.delete(self, name)
                self.packs.note_dropped(name)

    def loose_segments(self) -> builtins.list[str]:
        """The segments in the mirror (each also a loose object on the store)."""
        self.scan_folder()
        return [n for n in self._loose if kind_of(n) == "segment"]

    def after_write(self, *, all_due: bool = False) -> None:
        """After an acknowledged write: one packing step when enough segments are in no pack
        (:meth:`StorePacks.pack_step`), or every step due with ``all_due`` (after a merge or an
        unpack into the store).  Packing is never required, so a failure here (the store unreachable a
        moment after the write succeeded) fails nothing: the step is tried again after a later write
        (a pack is uploaded before the loose objects it holds are deleted, so nothing is ever without
        a copy)."""
        with contextlib.suppress(VaultError):
            if all_due or self.packs.due():
                self.packs.tidy(at_least=1 if all_due else storepacks.TIDY_AFTER)
                while self.packs.pack_step() and all_due:
                    pass

    def close(self) -> None:
        if self._checker is not None:
            self._checker.shutdown(wait=False)
        if self._direct is not None:
            self._direct.close()
        super().close()

    def host_details(self) -> dict[str, RemoteObject]:
        """What the store lists of each vault object (size, ETag, time written), from a listing now."""
        return self._list_remote()


def _human(size: int) -> str:
    for unit, step in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= step:
            return f"{size / step:.1f} {unit}"
    return f"{size} bytes"


def open_location(location: str, *, create: bool = False, home: str | None = None) -> FolderShelf | PackShelf:
    """The shelf at ``location``: an object store (``s3://…``), a folder or a ``.vmem`` file.
    ``create``: a new vault's shelf (an empty folder, or an empty bucket or prefix)."""
    if is_object_store(location):
        return ObjectShelf(location, create=create, home=home)
    if create:
        return FolderShelf(location, create=True)
    return open_shelf(location)
