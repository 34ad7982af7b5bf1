"""S3 buckets (AWS or any S3-compatible store): a paginated listing for full syncs, ranged reads, and
S3 event notifications (an SQS queue, or a webhook) for live changes.

A document's uri is its object key; its version is the ETag and size (and the version id on a
versioned bucket), so an object whose listing matches what the collection holds is never read.
Credentials come only from boto3's standard chain (environment, profile, instance role); the
endpoint from the `endpoint_url` option or boto3's own `AWS_ENDPOINT_URL(_S3)`.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from connectors.base import DocumentStat, SourceOptions, register_connector
from connectors.globs import match as _match
from connectors.s3_events import CREATED, ObjectEvent
from headwater.errors import ConfigurationError, ListingError, PermanentDocumentError, SkippedDocument
from headwater.models import DocumentChange, Op, time_sequence

KIND = "s3"
log = logging.getLogger(__name__)
# The order space of changes ordered by S3's sequencer (DocumentChange.order_space).
SEQUENCER_SPACE = "s3-sequencer"

# Error codes that mean "this object is not there (any more)".
_MISSING = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled"}
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "ExpiredToken",
                    "InvalidToken", "UnrecognizedClientException", "AuthFailure"}
# Storage classes whose objects a GET cannot read until they are restored (RestoreObject).
ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


def archived_reason(storage_class: str | None, restore: str | None) -> str | None:
    """Why an object cannot be read now (in an archive storage class, not restored), or None when it can.

    The one place this is decided: both modes read through `S3Connector.stat`, so a document in
    Glacier fails with this reason in either, instead of an opaque S3 error at read time.
    """
    if storage_class not in ARCHIVE_CLASSES:
        return None
    if restore and 'ongoing-request="false"' in restore:  # a restored copy is there to read
        return None
    state = "being restored" if restore and 'ongoing-request="true"' in restore else "not restored"
    return f"stored in {storage_class} and {state}; restore it (S3 RestoreObject) or exclude it"


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_HTTP_URL = re.compile(r"^https?://[^\s@/]+(/\S*)?$")


def _http_url(value: str | None) -> str | None:
    if value is not None and not _HTTP_URL.match(value):
        # No credentials in it either: they come from the AWS environment, never from a source's options.
        raise ValueError("must be an http(s):// URL without credentials in it")
    return value


class S3Options(SourceOptions):
    """A bucket, or a prefix of one. Credentials come from the AWS environment of whoever reads it
    (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role), never from here."""

    bucket: str = Field(description="The bucket's name.")
    prefix: str = Field(default="", max_length=1024, description="Only keys under this prefix (a directory: docs means docs/).")
    include: list[str] = Field(default_factory=lambda: ["**"], max_length=100, description="Globs of keys (below the prefix) to index.")
    exclude: list[str] = Field(default_factory=list, max_length=100, description="Globs of keys to leave out.")
    region: str | None = Field(default=None, max_length=40, pattern=r"^[a-z0-9-]+$")
    endpoint_url: str | None = Field(default=None, max_length=400,
                                     description="An S3-compatible endpoint; default AWS (or AWS_ENDPOINT_URL).")
    max_object_mb: float | None = Field(default=None, gt=0, description="Larger objects are skipped, never downloaded.")
    queue_url: str | None = Field(default=None, max_length=400,
                                  description="The SQS queue of the bucket's event notifications (for `headwater watch`).")
    wait_seconds: int = Field(default=10, ge=0, le=20, description="SQS long-poll wait.")
    page_size: int = Field(default=1000, ge=1, le=1000, description="Keys per listing request.")

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, value: str) -> str:
        if not _BUCKET.match(value) or ".." in value:
            raise ValueError("is not an S3 bucket name (3-63 characters: lowercase letters, digits, '.' and '-')")
        return value

    @field_validator("endpoint_url", "queue_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return _http_url(value)


@functools.lru_cache(maxsize=16)
def aws_client(service: str, region: str | None, endpoint_url: str | None) -> Any:
    """A boto3 client, one per (service, region, endpoint) in a process: building one costs ~50 ms, and
    fleet steps build a connector per document. boto3 clients are safe to share between threads."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                    max_pool_connections=32)
    return boto3.session.Session().client(service, region_name=region or None, endpoint_url=endpoint_url or None,
                                          config=config)


def object_version(etag: str | None, size: int | None, version_id: str | None = None) -> str | None:
    """The version Headwater records for an object: ETag and size, plus the version id of a versioned bucket."""
    if not etag or size is None:
        return None
    version = f"{etag.strip(chr(34))}:{size}"
    return f"{version}:{version_id}" if version_id and version_id != "null" else version


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


class S3Connector:
    """Objects under a prefix of one bucket. URIs are keys; globs match the key below the prefix."""

    kind = KIND

    def __init__(self, source_id: str, bucket: str, prefix: str = "", include: Sequence[str] = ("**",),
                 exclude: Sequence[str] = (), region: str | None = None, endpoint_url: str | None = None,
                 max_object_mb: float | None = None, queue_url: str | None = None,
                 wait_seconds: int = 10, page_size: int = 1000) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"{bucket!r} is not an S3 bucket name")
        self.source_id = source_id
        self.bucket = bucket
        # A prefix names a "directory": docs means docs/, never docs-old/.
        self.prefix = prefix.lstrip("/") if not prefix or prefix.endswith("/") else prefix.lstrip("/") + "/"
        self.include = tuple(include or ("**",))
        self.exclude = tuple(exclude or ())
        self.region = region
        self.endpoint_url = endpoint_url
        self.max_object_bytes = int(max_object_mb * 1048576) if max_object_mb else None
        self.queue_url = queue_url
        self.wait_seconds = wait_seconds
        self.page_size = page_size  # keys per listing request (S3's own maximum is 1,000)
        self._versioned: bool | None = None
        # The SQS consumer of the running watch (an AcknowledgedEvents source: a message is deleted
        # only after on_changes returned for it).
        self.consumer: Any = None

    @classmethod
    def url_options(cls, url: str) -> tuple[str, dict[str, Any]]:
        """`s3://BUCKET[/PREFIX]` -> (the default source id: the URL, its options)."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{url} is not an s3://BUCKET[/PREFIX] URL")
        return url.rstrip("/"), {"bucket": parts.netloc, "prefix": parts.path.lstrip("/")}

    def spec(self) -> dict:
        """What a worker needs to build the same connector (JSON; never a credential).

        The endpoint and region this process resolved (an option, or boto3's AWS_ENDPOINT_URL and
        AWS_REGION) travel with the run, so workers read the same store; credentials never do.
        """
        options: dict[str, Any] = {"bucket": self.bucket, "prefix": self.prefix, "include": list(self.include),
                                   "exclude": list(self.exclude)}
        endpoint, region = self.endpoint_url, self.region
        if endpoint is None:
            resolved = self.client.meta.endpoint_url
            endpoint = None if (urlsplit(resolved).hostname or "").endswith(".amazonaws.com") else resolved
        region = region or self.client.meta.region_name
        for name, value in (("region", region), ("endpoint_url", endpoint),
                            ("max_object_mb", self.max_object_bytes and self.max_object_bytes / 1048576)):
            if value:
                options[name] = value
        return {"kind": KIND, "id": self.source_id, "options": options}

    @property
    def client(self) -> Any:
        return aws_client("s3", self.region, self.endpoint_url)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    @property
    def root(self) -> str:  # what `watch` says it follows
        return f"s3://{self.bucket}/{self.prefix}"

    # Start-up check ---------------------------------------------------------------------------

    def check(self) -> None:
        """One request that fails with a clear ConfigurationError when the bucket or the credentials are wrong."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            # A listing, not HeadBucket: its error has a body, which tells refused credentials
            # (InvalidAccessKeyId, SignatureDoesNotMatch) from a denied bucket; a HEAD says only 403.
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except NoCredentialsError:
            raise ConfigurationError("no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                     "AWS_PROFILE, or run where an instance role is available") from None
        except ClientError as exc:
            raise ConfigurationError(self._bucket_error(error_code(exc))) from None
        except BotoCoreError as exc:
            raise ConfigurationError(f"cannot reach S3 for bucket {self.bucket} ({type(exc).__name__}); check "
                                     "the endpoint URL (or AWS_ENDPOINT_URL) and the network") from None

    def _bucket_error(self, code: str) -> str:
        if code in ("404", "NoSuchBucket", "NotFound"):
            return f"bucket {self.bucket} does not exist (or not in this account/endpoint); check the name and endpoint"
        if code in _BAD_CREDENTIALS:
            return (f"the AWS credentials were refused ({code}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                    "or the profile in use")
        if code in _DENIED:
            return f"listing bucket {self.bucket} is denied; the credentials need s3:ListBucket and s3:GetObject on it"
        return f"bucket {self.bucket} cannot be used ({code or 'unknown error'})"

    # Matching ----------------------------------------------------------------------------------

    def wants(self, key: str) -> bool:
        """Whether a key belongs to this source: under the prefix, not a "directory" marker, and the globs agree."""
        if not key.startswith(self.prefix) or key.endswith("/"):
            return False
        relative = key[len(self.prefix):]
        if not relative or any(_match(relative, p) for p in self.exclude):
            return False
        return any(_match(relative, p) for p in self.include)

    def covers(self, bucket: str, key: str) -> bool:
        return bucket == self.bucket and self.wants(key)

    # Lister ------------------------------------------------------------------------------------

    @property
    def versioned(self) -> bool:
        """Whether the bucket keeps versions (then versions are listed, so listing and reads agree on the version id)."""
        if self._versioned is None:
            from botocore.exceptions import ClientError

            try:
                status = self.client.get_bucket_versioning(Bucket=self.bucket).get("Status")
            except ClientError:  # not allowed to ask: treat as unversioned (ETag and size still decide)
                status = None
            self._versioned = status in ("Enabled", "Suspended")
        return self._versioned

    def list_documents(self) -> Iterator[DocumentChange]:
        """Every wanted object, page by page; a failed page raises ListingError, so nothing is mistaken for deleted."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield from (self._list_versions() if self.versioned else self._list_objects())
        except (ClientError, BotoCoreError) as exc:
            code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            raise ListingError(f"cannot list s3://{self.bucket}/{self.prefix} ({code}); the pass stopped so that "
                               "nothing is mistaken for deleted") from None

    def _list_objects(self) -> Iterator[DocumentChange]:
        for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.page_size}):
            for obj in page.get("Contents", ()):
                if self.wants(obj["Key"]):
                    yield self._listed(obj["Key"], obj.get("ETag"), obj.get("Size"), None)

    def _list_versions(self) -> Iterator[DocumentChange]:
        for page in self.client.get_paginator("list_object_versions").paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.page_size}):
            for obj in page.get("Versions", ()):
                if obj.get("IsLatest") and self.wants(obj["Key"]):
                    yield self._listed(obj["Key"], obj.get("ETag"), obj.get("Size"), obj.get("VersionId"))

    def _listed(self, key: str, etag: str | None, size: int | None, version_id: str | None) -> DocumentChange:
        return DocumentChange(self.source_id, key, Op.UPSERT, version=object_version(etag, size, version_id), size=size)

    # Reader ------------------------------------------------------------------------------------

    def stat(self, uri: str) -> DocumentStat:
        """HEAD the object; S3's errors become the OS errors the fetch stage names for the user."""
        head = self._call(uri, self.client.head_object, Bucket=self.bucket, Key=uri)
        archived = archived_reason(head.get("StorageClass"), head.get("Restore"))
        if archived is not None:
            raise PermanentDocumentError(archived)
        size = int(head.get("ContentLength", 0))
        if self.max_object_bytes is not None and size > self.max_object_bytes:
            raise SkippedDocument(f"{size / 1048576:.1f} MB is above this source's {self.max_object_bytes / 1048576:g} MB "
                                  "limit (max_object_mb); raise it or exclude the object")
        modified = head.get("LastModified")
        return DocumentStat(size=size, modified_time=modified.timestamp() if modified else None,
                            version=object_version(head.get("ETag"), size, head.get("VersionId")), url=self.url(uri))

    def read(self, uri: str, limit: int) -> bytes:
        """At most `limit` bytes (a ranged GET: a larger object is never downloaded whole)."""
        if limit <= 0:
            return b""
        try:
            body = self._call(uri, self.client.get_object, Bucket=self.bucket, Key=uri, Range=f"bytes=0-{limit - 1}")
        except _EmptyObject:
            return b""
        with body["Body"] as stream:
            return stream.read(limit)

    def _call(self, key: str, method: Callable[..., Any], **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(**params)
        except ClientError as exc:
            code = error_code(exc)
            if code in _MISSING:
                raise FileNotFoundError(key) from None
            if code in _DENIED:
                raise PermissionError(f"access denied to s3://{self.bucket}/{key}") from None
            if code == "InvalidRange":  # a ranged GET of a zero-byte object
                raise _EmptyObject() from None
            if code == "InvalidObjectState":  # archived after the HEAD, or an archive tier HEAD does not name
                raise PermanentDocumentError("stored in an archive storage class and not restored; restore it "
                                             "(S3 RestoreObject) or exclude it") from None
            if code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500"):
                raise ConnectionError(f"S3 answered {code}") from None
            raise OSError(f"S3 refused the request ({code or 'unknown error'})") from None
        except BotoCoreError as exc:
            raise ConnectionError(f"S3 could not be reached ({type(exc).__name__})") from None

    # Events ------------------------------------------------------------------------------------

    def changes_for(self, events: Iterable[ObjectEvent], latest: dict[str, str] | None = None
                    ) -> tuple[list[DocumentChange], dict[str, int], dict[str, str]]:
        """The live changes a batch of events means for this source, counts of what was left out, and
        the newest sequencer per key among them (for the caller to remember once the changes are accepted).

        An event with a sequencer is ordered by it: one not newer than the latest seen for its key
        (in `latest` or earlier in this batch) is a duplicate or arrived late, and is dropped. An event without
        one (moto, MinIO, or a store that sends none) is resolved by the object's current state:
        a HEAD says it exists (an upsert of what is there now) or not (a delete), once per key.
        """
        latest = latest or {}
        counts = {"ignored": 0, "stale": 0}
        advanced: dict[str, str] = {}
        ordered: dict[str, DocumentChange] = {}
        by_state: set[str] = set()
        for event in events:
            if not self.covers(event.bucket, event.key):
                counts["ignored"] += 1
                continue
            if event.sequencer is None:
                by_state.add(event.key)
                continue
            if event.sequencer <= advanced.get(event.key, latest.get(event.key, "")):
                counts["stale"] += 1
                continue
            advanced[event.key] = event.sequencer
            if event.kind == CREATED:
                change = DocumentChange(self.source_id, event.key, Op.UPSERT,
                                        version=object_version(event.etag, event.size, event.version_id),
                                        sequence=event.sequencer, order_space=SEQUENCER_SPACE)
            else:
                change = DocumentChange(self.source_id, event.key, Op.DELETE, sequence=event.sequencer,
                                        order_space=SEQUENCER_SPACE)
            ordered[event.key] = change
        for key in sorted(by_state - set(ordered)):
            ordered[key] = self.current_state(key)
        return list(ordered.values()), counts, advanced

    def current_state(self, key: str) -> DocumentChange:
        """What the object is now: an upsert of its current version, or a delete; ordered by when it was seen.

        Its order key is a time, in the default order space, never compared with sequencers: which
        of a HEAD and an event came first cannot be known, and each is right about its own moment.
        """
        seen = time_sequence()
        try:
            head = self._call(key, self.client.head_object, Bucket=self.bucket, Key=key)
        except FileNotFoundError:
            return DocumentChange(self.source_id, key, Op.DELETE, sequence=seen)
        except PermissionError:  # the read will fail and say so, against this document
            return DocumentChange(self.source_id, key, Op.UPSERT, sequence=seen)
        size = int(head.get("ContentLength", 0))
        return DocumentChange(self.source_id, key, Op.UPSERT, sequence=seen,
                              version=object_version(head.get("ETag"), size, head.get("VersionId")))

    def watch(self, on_changes: Callable[[list[DocumentChange] | None], None], stop: threading.Event,
              on_dead_letter: Callable[[str, str, str], None] | None = None) -> None:
        """Consume the SQS queue (`queue_url`) of this bucket's event notifications until `stop` is set."""
        from connectors.s3_queue import QueueConsumer

        if not self.queue_url:
            raise ConfigurationError(f"watching {self.root} needs the SQS queue that receives its event "
                                     "notifications (--queue-url, or queue_url in headwater.toml)")
        self.consumer = QueueConsumer(self, self.queue_url, on_changes, on_dead_letter, wait_seconds=self.wait_seconds)
        self.consumer.run(stop)

    def event_counts(self) -> dict[str, int]:
        """What the last watch saw: messages, changes, ignored, stale and dead-lettered events."""
        return dict(self.consumer.counts) if self.consumer is not None else {}


class _EmptyObject(Exception):
    pass


register_connector(KIND, S3Connector, S3Options, url_schemes=("s3",))
