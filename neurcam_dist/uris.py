"""Paths that may be object-store URIs (``s3://bucket/key``, ``gs://...``, anything pyarrow or
fsspec resolves): one way to tell them from local paths, join them and open their file system.

Credentials never appear in a path the service prints or saves: they come from the standard AWS
variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``)
or the URI itself (keys as ``s3://KEY:SECRET@bucket/...``, the endpoint as the query option
``?endpoint_override=host:port&scheme=http``); ``redaction`` masks the keys wherever a URI is shown.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ConfigError

# What the front door takes for a place (``service``'s ``input``, ``output``, ``model``): a path or
# URI as text, a ``pathlib.Path`` or a ``Location`` (anything ``os.fspath`` reads), each read below
# through ``os.fspath`` or ``Location``.
Where = str | os.PathLike

# An S3-compatible server other than AWS (MinIO, SeaweedFS, Ceph) rejects or mangles the CRC
# checksums that recent AWS SDKs add to every request and expect on every response, so what was
# written cannot be read back. "When required" is what such servers support and AWS accepts.
S3_DEFAULTS = {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
               "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED"}


def is_uri(path) -> bool:
    """A URI with a scheme other than ``file://`` (which is a local path)."""
    p = str(path)
    return "://" in p and not p.startswith("file://")


def local(path) -> str:
    """A local path without its ``file://`` prefix."""
    p = os.fspath(path)
    return p[len("file://"):] if p.startswith("file://") else p


_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def expand(path):
    """A local path with ``~`` and ``$VAR`` / ``${VAR}`` expanded as a shell would (one rule for
    every command's flags and every config's paths); a variable that is not set is an
    ``errors.ConfigError`` naming it, never a folder called ``$VAR``. URIs are left as written."""
    if path is None or is_uri(path):
        return path
    text = os.fspath(path)
    missing = sorted({m.group(1).strip("{}") for m in _VARIABLE.finditer(text)
                      if m.group(1).strip("{}") not in os.environ})
    if missing:
        raise ConfigError(f"{text}: the environment variable(s) {', '.join(missing)} are not set "
                          f"(paths expand ~ and $VAR as a shell does)")
    out = os.path.expanduser(os.path.expandvars(text))
    return out if isinstance(path, str) else type(path)(out)


def join(base, *parts: str) -> str:
    """``base/part/...`` for a URI (keeping its query options at the end) or a local path."""
    base = os.fspath(base)
    if not is_uri(base):
        return os.path.join(base, *parts)
    head, sep, query = base.partition("?")
    return "/".join([head.rstrip("/"), *(p.strip("/") for p in parts)]) + (sep + query)


def as_path(path):
    """A ``Path`` for a local path; the URI string unchanged (``Path`` would fold its ``//``)."""
    return path if is_uri(path) else Path(local(path))


def configure_s3() -> None:
    """Set ``S3_DEFAULTS`` where the environment does not say otherwise, and, with a custom endpoint
    (``AWS_ENDPOINT_URL``: not AWS), keep the SDK from asking a cloud metadata service for a region
    or credentials. Called before a file system is opened and before Ray starts, so that local
    workers inherit the same settings."""
    for key, value in S3_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if os.environ.get("AWS_ENDPOINT_URL"):
        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


# Every object-store call ends in bounded time: the SDK's defaults left a command waiting 100 s
# on an endpoint that accepts connections and never answers. NEURCAM_S3_TIMEOUT (seconds a
# connection may stay silent) and AWS_MAX_ATTEMPTS (the SDK's own variable) change them.
S3_TIMEOUT_S = 15.0
S3_CONNECT_TIMEOUT_S = 5.0
S3_MAX_ATTEMPTS = 3


def store_did_not_answer(error) -> bool:
    """Whether ``error`` (an exception or its text) is pyarrow's S3 client failing to reach the
    endpoint (refused, reset, timed out), as opposed to a denial or a missing key."""
    import re
    return bool(re.search(r"NETWORK_CONNECTION|curlCode|Could not connect|timed out", str(error)))


def bounded_s3(fs):
    """pyarrow's ``S3FileSystem`` ``fs`` with its options kept and its waits bounded: a connection
    attempt of ``S3_CONNECT_TIMEOUT_S``, no more than ``NEURCAM_S3_TIMEOUT`` (default
    ``S3_TIMEOUT_S``) seconds without a byte, ``AWS_MAX_ATTEMPTS`` (default ``S3_MAX_ATTEMPTS``)
    tries: an endpoint that hangs fails in about a minute at most, with pyarrow's error."""
    from pyarrow import fs as pafs
    options = fs.__reduce__()[1][0]      # the options it was made with (its pickled form)
    timeout = float(os.environ.get("NEURCAM_S3_TIMEOUT", S3_TIMEOUT_S))
    options.update(connect_timeout=min(S3_CONNECT_TIMEOUT_S, timeout), request_timeout=timeout,
                   retry_strategy=pafs.AwsStandardS3RetryStrategy(
                       max_attempts=int(os.environ.get("AWS_MAX_ATTEMPTS", S3_MAX_ATTEMPTS))))
    return pafs.S3FileSystem(**options)


def filesystem(uri):
    """``(pyarrow FileSystem, path inside it)`` for a URI: pyarrow's own for the schemes it knows
    (s3, gs, hdfs, abfs), otherwise fsspec's behind pyarrow's interface; a ``Location``'s own,
    opened once (``Location.filesystem``)."""
    if isinstance(uri, Location):
        return uri.filesystem()
    from pyarrow import fs as pafs
    configure_s3()
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return (bounded_s3(fs) if fs.type_name == "s3" else fs), path
    except (ValueError, TypeError, OSError) as exc:
        if "Unrecognized filesystem type" not in str(exc) and "unsupported" not in str(exc).lower():
            raise
    import fsspec
    fs, path = fsspec.core.url_to_fs(uri)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


class Location(os.PathLike):
    """A folder or file the service reads or writes, resolved once where it comes in: local or an
    object-store URI (``is_uri``), ``location / "name"`` below it, and its pyarrow file system with
    the path inside it, opened on first use and shared with what lies below. Anything that takes a
    path takes it (``os.fspath`` gives the text, query options kept at the end of a URI).

    A small class over pyarrow's file systems rather than ``universal-pathlib`` (fsspec): every
    reader and writer here already speaks pyarrow's ``FileSystem`` (Parquet datasets, the atomic
    publication, the bounded S3 client of ``filesystem``), which fsspec's paths would wrap again."""

    __slots__ = ("text", "_opened")

    def __init__(self, where):
        # text as it comes in (a flag, a config value) expands ~ and $VAR; a path object is taken as it is
        self.text = (where.text if isinstance(where, Location) else
                     os.fspath(expand(where)) if isinstance(where, str) else os.fspath(where))
        self._opened = where._opened if isinstance(where, Location) else None

    def __truediv__(self, part: str) -> "Location":
        child = Location(self)                 # this location's text is expanded already: not again
        child.text, child._opened = join(self.text, part), None
        if self._opened is not None:
            fs, root = self._opened
            child._opened = (fs, f"{root.rstrip('/')}/{part.strip('/')}" if self.is_uri else os.path.join(root, part))
        return child

    def __fspath__(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Location({self.text!r})"

    def __eq__(self, other) -> bool:
        """Equal to a location or a path of the same text (``Location("s3://b/o") == "s3://b/o"``)."""
        return isinstance(other, (Location, str, os.PathLike)) and os.fspath(other) == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    @property
    def is_uri(self) -> bool:
        """An object-store URI (not a local path)."""
        return is_uri(self.text)

    def resolved(self) -> "Location":
        """A local location made absolute (links resolved: a Ray worker in another folder finds
        it); a URI as it is."""
        return self if self.is_uri else Location(Path(local(self.text)).resolve())   # a path: not expanded again

    @property
    def parent(self) -> "Location":
        """The folder that holds this file or folder: a local path's parent, a URI up to its last
        ``/`` (a bucket is its own)."""
        up = Location(self)                    # this location's text is expanded already: not again
        scheme, _, rest = self.text.partition("://")
        up.text = (f"{scheme}://{rest.rstrip('/').rsplit('/', 1)[0]}" if self.is_uri
                   else os.fspath(Path(local(self.text)).parent))
        up._opened = None
        return up

    @property
    def path(self):
        """A ``Path`` for a local location; the URI text for an object store (``as_path``)."""
        return as_path(self.text)

    def filesystem(self):
        """``(pyarrow FileSystem, path inside it)``: ``filesystem`` for a URI, the local file system
        otherwise; opened once."""
        if self._opened is None:
            if self.is_uri:
                self._opened = filesystem(self.text)
            else:
                from pyarrow import fs as pafs
                self._opened = (pafs.LocalFileSystem(), os.path.abspath(local(self.text)))
        return self._opened
