"""A GCS emulator on 127.0.0.1 for tests and benchmarks: gcp-storage-emulator, plus two
things real GCS does that it does not.

- Generation preconditions: `ifGenerationMatch` on uploads and deletes (0: the object
  must not exist), answered 412 as GCS does. The job's lease relies on them.
- With `running(latency_s=...)`, each request waits that long and requests are served
  concurrently, as on GCS, for benchmarks of how a reader copes with a remote store;
  `running(concurrent=True)` serves them concurrently with no wait (a test that reads
  what it uploaded); without either, the emulator serves one connection at a time.
- A count of the requests served, by kind (create, upload, read, metadata, list,
  delete, batch; objects_deleted, each object deleted alone or inside a batch
  request; bytes_read, the bytes of object data served), so that tests and
  benchmarks can count what the job costs as data grows.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import http.server
import logging
import os
import socket
import threading
import time
from http import HTTPStatus
from typing import Iterator

from gcp_storage_emulator import server as emulator
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_counts: collections.Counter = collections.Counter()
_lock = threading.Lock()
_latency_s = 0.0


def _count(kind: str, n: int = 1) -> None:
    with _lock:
        _counts[kind] += n


def _kind(method: str, path: str, query: str) -> str:
    if path.startswith("/batch"):
        return "batch"
    if "/upload/" in path:
        return "upload" if method == "PUT" or "upload_id" in query else "create"
    if method == "DELETE":
        return "delete"
    if method == "GET":
        if path.endswith("/o"):
            return "list"
        return "read" if "alt=media" in query else "metadata"
    return method.lower()


def _counting(method: str, original):
    def handle(self):
        path, _, query = self.path.partition("?")
        _count(_kind(method, path, query))
        if _latency_s:
            time.sleep(_latency_s)
        return original(self)
    return handle


def _generation(storage, bucket: str, name: str):
    try:
        return str(storage.get_file_obj(bucket, name).get("generation"))
    except NotFound:
        return None


def _precondition(handler, name_of):
    """Answer 412 when ifGenerationMatch does not hold, else run `handler`."""
    def checked(request, response, storage, *args, **kwargs):
        wanted = request.query.get("ifGenerationMatch")
        if wanted:
            current = _generation(storage, request.params["bucket_name"], name_of(request))
            if (wanted[0] == "0" and current is not None) or (
                    wanted[0] != "0" and current != wanted[0]):
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                return None
        return handler(request, response, storage, *args, **kwargs)
    return checked


def _upload_name(request) -> str:
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data or {}
    meta = data.get("meta") if isinstance(data, dict) else None
    return (meta or data).get("name", "")


def _install() -> None:
    if getattr(emulator, "_vws_installed", False):
        return
    delete_one = objects._delete

    def counted_delete(*args, **kwargs):
        _count("objects_deleted")  # each object, whether alone or inside a batch request
        return delete_one(*args, **kwargs)

    objects._delete = counted_delete
    replacements = {
        objects.insert: _precondition(objects.insert, _upload_name),
        objects.delete: _precondition(objects.delete, lambda r: r.params["object_id"]),
    }
    for _, handlers in emulator.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler in replacements:
                handlers[method] = replacements[handler]
    objects.insert = replacements[objects.insert]
    close = emulator.Response.close

    def counted_close(self):
        handler = self._handler
        if handler.command == "GET" and "alt=media" in handler.path:
            content = self._content
            _count("bytes_read", len(content.encode() if isinstance(content, str) else content))
        return close(self)

    emulator.Response.close = counted_close
    for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
        name = f"do_{method}"
        setattr(emulator.RequestHandler, name,
                _counting(method, getattr(emulator.RequestHandler, name)))
    emulator._vws_installed = True


def counts() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset_counts() -> None:
    with _lock:
        _counts.clear()


def upload(local: str, remote: str) -> None:
    """The files of the local folder `local` (a dataset: not its subfolders) copied to
    `remote` (`bkt/out`) on the running emulator, then the request counts cleared."""
    import fsspec

    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    for name in os.listdir(local):
        if os.path.isfile(os.path.join(local, name)):
            fs.put_file(os.path.join(local, name), f"{remote}/{name}")
    reset_counts()


class _ConcurrentServer(http.server.ThreadingHTTPServer):
    request_queue_size = 256    # the default 5 drops a batch's connections: 1 s retries
    daemon_threads = True


class _ConcurrentAPI(emulator.APIThread):
    """The emulator's API thread, with a thread per request."""

    def run(self):
        self._httpd = _ConcurrentServer(
            (self._host, self._port), functools.partial(emulator.RequestHandler, self._storage))
        self.is_running.set()
        self._httpd.serve_forever()


# gcsfs: no bucket-type lookup, no credentials. google-auth: no probe of the GCE metadata
# server (a child process then fails fast to find credentials; Beam still retries for
# 30 s where there are none, so a child that uses gs:// calls `anonymous_beam` first).
ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "FSSPEC_GCS_TOKEN": "anon",
       "NO_GCE_CHECK": "true"}


def anonymous_beam() -> None:
    """Let Beam's gs:// use an anonymous client, as the emulator wants: without it, the
    first gs:// access of a process spends 25 s retrying to find credentials."""
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials_init, auth._Credentials._credentials = True, None


@contextlib.contextmanager
def running(bucket: str = "bkt", latency_s: float = 0.0,
            concurrent: bool = False) -> Iterator[str]:
    """Serve an in-memory emulator with bucket `bucket`; gcsfs, google-cloud-storage and
    Beam's gs:// all point at it while the context lasts. Yields its address. With a
    `latency_s`, each request waits that long. With a latency or `concurrent`, requests
    are served at once, a thread each (for tests and benchmarks that read: the
    emulator's storage is not meant for concurrent writes); else one connection at a
    time, so that a reader's concurrent ranged reads (gcsfs keeps each connection open)
    wait for each other's connections to idle out."""
    global _latency_s
    import fsspec

    from beam_jobs.core import storage

    _install()
    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    if latency_s or concurrent:
        srv._api = _ConcurrentAPI("127.0.0.1", port, srv._storage)
    _latency_s = latency_s
    srv.start()
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", **ENV}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fsspec.config.conf.setdefault("gcs", {})["token"] = "anon"
    storage.gcs_client.cache_clear()
    anonymous_beam()
    try:
        yield env["STORAGE_EMULATOR_HOST"]
    finally:
        _latency_s = 0.0
        srv.stop()
        storage.gcs_client.cache_clear()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
