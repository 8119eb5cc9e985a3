"""Serve renewed certificates without a restart: the webhook's SSLContext loads the files again when
they change (labgate's rotation, a kubelet-updated Secret volume, or cert-manager). At start, the
files may not exist yet (the chart's pods mount the Secret before labgate or cert-manager has written
it): `wait_for_files` waits for them, within a bound, instead of exiting into a restart loop."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class CertificateReloader:
    """Polls the certificate and key files; new TLS handshakes use the new pair once both load."""

    def __init__(self, context: ssl.SSLContext, cert_file: Path, key_file: Path, *, interval: float = 1.0):
        self.context = context
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self._stop = threading.Event()
        self._seen = self._stamp()
        self._thread = threading.Thread(target=self._run, name="tls-reload", daemon=True)
        self.reloads = 0

    def _stamp(self) -> tuple[float, float, int, int]:
        cert, key = self.cert_file.stat(), self.key_file.stat()
        return cert.st_mtime, key.st_mtime, cert.st_ino, key.st_ino

    def check(self) -> bool:
        """Reload if the files changed; True when a new pair is now served."""
        try:
            stamp = self._stamp()
        except OSError:
            return False
        if stamp == self._seen:
            return False
        try:
            # SSLContext is mutable: existing connections keep their session, new ones get this pair.
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as err:
            # Caught between writing the key and the certificate: try again at the next tick.
            log.warning("certificate files changed but do not load yet: %s", err)
            return False
        self._seen = stamp
        self.reloads += 1
        log.info("serving the renewed certificate from %s", self.cert_file)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def wait_for_files(
    paths: Sequence[Path],
    *,
    timeout: float,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Path]:
    """Wait until every path is a non-empty file, at most `timeout` seconds; the ones still missing
    (none: all there). Says once in the log what it waits for."""
    deadline = clock() + timeout
    said = False
    while True:
        missing = [path for path in paths if not _is_written(path)]
        if not missing or clock() >= deadline:
            return missing
        if not said:
            log.info("waiting up to %.0fs for %s", timeout, ", ".join(map(str, missing)))
            said = True
        sleep(interval)


def _is_written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False
