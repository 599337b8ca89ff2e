"""Ray Train's and Ray Tune's storage on an object store that may blink: every call retried while
the store does not answer, for up to ``STORE_OUTAGE_S`` seconds.

Ray writes checkpoints from the workers and its checkpoint index from its controller through one
pyarrow file system (``RunConfig(storage_filesystem=...)``), pickled to each of those processes.
pyarrow's S3 client retries a refused connection 3 times within a fraction of a second, and its
``retry_strategy`` does not survive pickling, so a store restarted under a run (a MinIO or
SeaweedFS pod rescheduled, a rolling upgrade: seconds of refused connections) failed the run.
``RetryingHandler`` wraps the S3 file system in a ``pyarrow.fs.PyFileSystem`` that pickles as its
options and retries each call that met a store away for a moment (``passing``: refused, reset,
timed out, or an internal error of a store still starting; never a denial or a missing key) with
growing waits until the outage bound; a file written is uploaded whole when its stream closes, so
a retry never leaves half an object. Past the bound the store's own error is raised, and the run fails as before, naming it.
"""
from __future__ import annotations

import io
import os
import time

from pyarrow import fs as pafs

from ..uris import bounded_s3, store_did_not_answer

STORE_OUTAGE_S = 60.0   # NEURCAM_STORE_OUTAGE_S: how long a call waits for a store that stopped answering
FIRST_WAIT_S, LONGEST_WAIT_S = 0.5, 8.0


def outage_seconds() -> float:
    """The outage bound in effect: ``NEURCAM_STORE_OUTAGE_S``, else ``STORE_OUTAGE_S``."""
    return float(os.environ.get("NEURCAM_STORE_OUTAGE_S", STORE_OUTAGE_S))


TRANSIENT = ("INTERNAL_FAILURE", "SERVICE_UNAVAILABLE", "SLOW_DOWN", "SlowDown", "please try again")


def passing(exc: BaseException) -> bool:
    """An error a store that is back in a moment gives: it did not answer (refused, reset, timed
    out: ``uris.store_did_not_answer``), or it answered that it cannot serve yet (an internal
    error, 503, slow down: a SeaweedFS or MinIO still starting). Never a denial or a missing key."""
    return store_did_not_answer(exc) or any(t in str(exc) for t in TRANSIENT)


def retried(call, *args, say=None):
    """``call(*args)``, again after a wait (0.5 s, doubling to 8 s) each time it raises an error
    of a store that is away for a moment (``passing``), until ``outage_seconds()`` have passed
    since the first such error; then that error. ``say(text)`` hears of each wait."""
    deadline, wait = None, FIRST_WAIT_S
    while True:
        try:
            return call(*args)
        except OSError as exc:
            if not passing(exc):
                raise
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + outage_seconds()
            if now + wait > deadline:
                raise
            if say is not None:
                say(f"the object store did not answer ({str(exc).splitlines()[0][:160]}): trying again in {wait:g} s")
            time.sleep(wait)
            wait = min(wait * 2, LONGEST_WAIT_S)


def _whole(opened) -> bytes:
    """Every byte of the file ``opened()`` opens (read again whole when a retry opens it again)."""
    with opened() as f:
        return f.read()


class _Upload(io.RawIOBase):
    """A file being written: held in memory and uploaded whole, with retries, when closed."""

    def __init__(self, handler: "RetryingHandler", path: str, metadata):
        super().__init__()
        self.handler, self.path, self.metadata, self.buffer = handler, path, metadata, io.BytesIO()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.buffer.write(data)

    def tell(self) -> int:
        return self.buffer.tell()

    def close(self) -> None:
        if self.closed:
            return
        body = self.buffer.getvalue()

        def put() -> None:
            with self.handler.fs.open_output_stream(self.path, compression=None, metadata=self.metadata) as out:
                out.write(body)
        try:
            retried(put)
        finally:
            super().close()


class RetryingHandler(pafs.FileSystemHandler):
    """The calls of an S3 file system, each retried through an outage (module docstring).
    Pickles as the S3 options, so every Ray process opens its own client."""

    def __init__(self, options: dict):
        self.options = dict(options)
        self._fs = None

    def __getstate__(self) -> dict:
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.options, self._fs = state["options"], None

    def __eq__(self, other) -> bool:
        return isinstance(other, RetryingHandler) and other.options == self.options

    def __ne__(self, other) -> bool:
        return not self == other

    @property
    def fs(self):
        """The S3 file system itself, opened in this process on first use (``uris.bounded_s3``),
        writing in the calling thread: Ray copies checkpoints with ``pyarrow.fs.copy_files`` on
        pyarrow's IO threads, and a background write would wait for an IO thread of its own while
        every one of them waits for a write (a copy of 40 files hung)."""
        if self._fs is None:
            self._fs = bounded_s3(pafs.S3FileSystem(**{**self.options, "background_writes": False}))
        return self._fs

    def get_type_name(self) -> str:
        """The file system's name in pyarrow's messages."""
        return "neurcam-retrying-s3"

    def normalize_path(self, path):
        """The S3 file system's form of ``path``."""
        return self.fs.normalize_path(path)

    def get_file_info(self, paths):
        """The info of ``paths``, retried."""
        return retried(self.fs.get_file_info, paths)

    def get_file_info_selector(self, selector):
        """The info of what ``selector`` lists, retried."""
        return retried(self.fs.get_file_info, selector)

    def create_dir(self, path, recursive):
        """Make a directory (a prefix), retried."""
        retried(lambda: self.fs.create_dir(path, recursive=recursive))

    def delete_dir(self, path):
        """Delete a directory and what it holds, retried."""
        retried(self.fs.delete_dir, path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        """Delete what a directory holds, retried."""
        retried(lambda: self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok))

    def delete_root_dir_contents(self):
        """Refused: a whole bucket is never emptied through here."""
        raise NotImplementedError("refusing to empty a whole bucket")

    def delete_file(self, path):
        """Delete one object, retried."""
        retried(self.fs.delete_file, path)

    def move(self, src, dest):
        """Move an object, retried."""
        retried(self.fs.move, src, dest)

    def copy_file(self, src, dest):
        """Copy an object, retried."""
        retried(self.fs.copy_file, src, dest)

    def open_input_stream(self, path):
        """The object's bytes, read whole with retries, as a stream."""
        import pyarrow as pa
        return pa.BufferReader(retried(_whole, lambda: self.fs.open_input_stream(path, compression=None)))

    def open_input_file(self, path):
        """The object's bytes, read whole with retries, as a random-access file."""
        import pyarrow as pa
        return pa.BufferReader(retried(_whole, lambda: self.fs.open_input_file(path)))

    def open_output_stream(self, path, metadata):
        """A file held in memory and uploaded whole, with retries, when closed (``_Upload``)."""
        import pyarrow as pa
        return pa.PythonFile(_Upload(self, path, metadata), mode="w")

    def open_append_stream(self, path, metadata):
        """Refused: objects cannot be appended to."""
        raise NotImplementedError("appending to an object is not supported on an object store")


def ray_storage(location) -> dict:
    """``RunConfig``'s storage arguments for ``location`` (a ``uris.Location``): on S3, the path
    inside the bucket and a ``RetryingHandler`` file system; elsewhere the path as it is."""
    fs, path = location.filesystem()
    if not location.is_uri or fs.type_name != "s3":
        return {"storage_path": str(location)}
    options = fs.__reduce__()[1][0]
    return {"storage_path": path, "storage_filesystem": pafs.PyFileSystem(RetryingHandler(options))}
