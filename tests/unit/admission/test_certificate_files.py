"""`labgate serve` at start, when the Secret volume holding its certificate is not filled yet (the
chart's pods mount it before the reconciler or cert-manager writes it): it waits a bounded time for
the files, then serves them or exits saying who writes them; and it reloads renewed files."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import main
from labgate.core.certificates import issue_serving_cert, make_ca
from webhook.settings import get_settings
from webhook.tls_reload import CertificateReloader, wait_for_files


@pytest.fixture(autouse=True)
def settings_read_afresh() -> Iterator[None]:
    """`labgate serve` reads its settings once per process: each test is a process of its own."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


class Clock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: dict[float, Path] = {}

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        written = self.on_sleep.pop(self.now, None)
        if written is not None:
            written.write_text("PEM")


def test_files_written_while_waiting_are_waited_for(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    key.write_text("PEM")
    clock = Clock()
    clock.on_sleep[5.0] = cert
    missing = wait_for_files((cert, key), timeout=120, clock=lambda: clock.now, sleep=clock.sleep)
    assert missing == []
    assert clock.now == 5.0, "it returned as soon as both were there"


def test_files_still_missing_after_the_bound_are_named(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    key.write_text("")  # an empty file is not a written one
    clock = Clock()
    missing = wait_for_files((cert, key), timeout=30, clock=lambda: clock.now, sleep=clock.sleep)
    assert missing == [cert, key]
    assert clock.now == 30.0, "it waited the whole bound and no longer"


def test_no_wait_when_the_bound_is_zero(tmp_path: Path) -> None:
    clock = Clock()
    missing = wait_for_files((tmp_path / "tls.crt",), timeout=0, clock=lambda: clock.now, sleep=clock.sleep)
    assert missing == [tmp_path / "tls.crt"]
    assert clock.sleeps == []


def test_serve_without_its_certificate_exits_saying_who_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LABGATE_TLS_CERT_FILE", str(tmp_path / "tls.crt"))
    monkeypatch.setenv("LABGATE_TLS_KEY_FILE", str(tmp_path / "tls.key"))
    monkeypatch.setenv("LABGATE_ALLOW_UNAUTHENTICATED_CALLERS", "true")
    monkeypatch.setenv("LABGATE_TLS_WAIT_SECONDS", "0")
    assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert f"no certificate in {tmp_path / 'tls.crt'}, {tmp_path / 'tls.key'} after 0s" in err
    assert "the reconciler's leader writes it" in err


def test_serve_refuses_a_wait_beyond_an_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABGATE_TLS_WAIT_SECONDS", "7200")
    with pytest.raises(ValueError, match="tls_wait_seconds\n  Input should be less than or equal to 3600"):
        main(["serve"])


def test_renewed_files_are_served_without_a_restart(tmp_path: Path) -> None:
    ca = make_ca("test-ca")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = issue_serving_cert(ca, common_name="a", dns_names=("a",))
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    reloader = CertificateReloader(context, cert, key)
    assert reloader.check() is False, "nothing changed"
    second = issue_serving_cert(ca, common_name="a", dns_names=("a",))
    (tmp_path / "new.crt").write_bytes(second.cert_pem)
    (tmp_path / "new.key").write_bytes(second.key_pem)
    (tmp_path / "new.crt").replace(cert)  # as the kubelet swaps a Secret volume's files: new inodes
    (tmp_path / "new.key").replace(key)
    assert reloader.check() is True
    assert reloader.reloads == 1
