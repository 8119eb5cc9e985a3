"""A real OCI registry on loopback for the provenance tests, and the real tools that fill it.

- LocalRegistry: the CNCF distribution registry (pinned in toolchain/versions.env) on a free port, with
  filesystem storage, optionally behind htpasswd (Basic) or token (Bearer) auth, optionally over TLS.
- TokenServer: the token service for a Bearer registry, as Docker Hub's auth.docker.io works: it
  checks Basic credentials and issues ES256 JWTs that the registry verifies against a JWKS file.
- ImageTools: `crane` to push images and indexes, `cosign` v2 and v3 to make keys and sign, each with
  its own DOCKER_CONFIG so nothing touches the user's home.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from devcluster.processes import Lifecycle, ManagedProcess, free_port, spawn, wait_until
from devcluster.tools import tool
from labgate.core.certificates import KeyPair

# cosign v3 signs offline (no Rekor, no TUF signing config) and writes a Sigstore bundle; cosign v2
# writes the legacy `.sig` tag. Both accept plain-HTTP registries only when told.
COSIGN_V2_SIGN_FLAGS = ("--tlog-upload=false", "--allow-http-registry", "--yes")
COSIGN_V3_SIGN_FLAGS = ("--use-signing-config=false", "--tlog-upload=false", "--allow-http-registry", "--yes")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TokenHTTPServer(ThreadingHTTPServer):
    # The stdlib default backlog (5) drops connections when a burst of admissions asks for tokens at once,
    # and a dropped SYN costs a 1 s retransmit: more than an image's whole budget.
    request_queue_size = 128
    daemon_threads = True


class TokenServer:
    """A token service for a registry with `auth: token`: GET /token?service=...&scope=... with Basic
    credentials of one of `users` returns a JWT granting the actions asked; anonymous requests get a
    token that grants nothing (so the registry answers 401 for private repositories)."""

    def __init__(self, users: dict[str, str], *, service: str, issuer: str = "labgate-test-issuer"):
        self.users = users
        self.service = service
        self.issuer = issuer
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.kid = secrets.token_hex(8)
        self.issued = 0
        self._server = _TokenHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-server", daemon=True)

    @property
    def realm(self) -> str:
        # A name, not an IP literal: clients (crane, cosign, labgate) refuse realms at private addresses
        # other than the registry's own host:port, so that a registry cannot aim them at internal services.
        return f"http://localhost:{self._server.server_address[1]}/token"

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "EC",
                    "crv": "P-256",
                    "x": _b64url(numbers.x.to_bytes(32, "big")),
                    "y": _b64url(numbers.y.to_bytes(32, "big")),
                    "kid": self.kid,
                    "alg": "ES256",
                    "use": "sig",
                }
            ]
        }

    def token(self, subject: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "kid": self.kid}
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": self.service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def _user(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.lower().startswith("basic "):
            return None
        try:
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        except ValueError:
            return None
        return user if self.users.get(user) == password and password else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                authorization = self.headers.get("Authorization")
                user = server._user(authorization)
                if authorization and user is None:
                    self.send_response(401)
                    self.end_headers()
                    return
                access = []
                for scope in query.get("scope", []):
                    kind, _, rest = scope.partition(":")
                    name, _, actions = rest.rpartition(":")
                    if user is not None:
                        access.append({"type": kind, "name": name, "actions": actions.split(",")})
                body = json.dumps({"token": server.token(user or "", access), "expires_in": 300}).encode()
                server.issued += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@dataclass
class LocalRegistry(Lifecycle):
    """The distribution registry on 127.0.0.1:<free port> (or `address`, e.g. where a real node in its
    own network namespace reaches the host). Use as a context manager, or start()/stop()."""

    workdir: Path
    name: str = "registry"
    htpasswd_users: dict[str, str] | None = None
    token_server: TokenServer | None = None
    tls: KeyPair | None = None
    ca_file: Path | None = None
    port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None
    address: str = "127.0.0.1"
    detached: bool = False  # outlives this Python process (`python -m devcluster up`)

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def _config(self) -> dict[str, Any]:
        directory = self.workdir / self.name
        directory.mkdir(parents=True, exist_ok=True)
        http: dict[str, Any] = {"addr": self.host, "secret": secrets.token_hex(16)}
        if self.tls is not None:
            (directory / "tls.crt").write_bytes(self.tls.cert_pem)
            (directory / "tls.key").write_bytes(self.tls.key_pem)
            http["tls"] = {"certificate": str(directory / "tls.crt"), "key": str(directory / "tls.key")}
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "info"},
            "storage": {
                "filesystem": {"rootdirectory": str(directory / "data")},
                "delete": {"enabled": True},
            },
            "http": http,
        }
        if self.htpasswd_users is not None:
            import bcrypt  # noqa: PLC0415 - a dev dependency: only the test registry needs bcrypt

            lines = [
                f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}"
                for user, password in self.htpasswd_users.items()
            ]
            (directory / "htpasswd").write_text("\n".join(lines) + "\n")
            config["auth"] = {"htpasswd": {"realm": "labgate-test", "path": str(directory / "htpasswd")}}
        elif self.token_server is not None:
            (directory / "jwks.json").write_text(json.dumps(self.token_server.jwks()))
            config["auth"] = {
                "token": {
                    "realm": self.token_server.realm,
                    "service": self.token_server.service,
                    "issuer": self.token_server.issuer,
                    "jwks": str(directory / "jwks.json"),
                }
            }
        return config

    def is_answering(self) -> bool:
        verify = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else True
        response = httpx.get(f"{self.url}/v2/", timeout=1.0, verify=verify)
        return response.status_code in (200, 401)

    def start(self, *, timeout: float = 20.0) -> None:
        config_path = self.workdir / self.name / "config.yml"
        config = self._config()
        config_path.write_text(yaml.safe_dump(config))
        binary = str(tool("registry").binary())
        self.process = spawn(
            self.workdir, self.name, [binary, "serve", str(config_path)], detached=self.detached
        )
        try:
            wait_until(self.is_answering, what=f"registry {self.name}", timeout=timeout, watch=[self.process])
        except BaseException:
            self.process.stop()
            raise

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def random_layer(path: Path, size: int = 512) -> Path:
    """A tarball holding one file of random bytes: every image pushed with it has a new digest."""
    with tarfile.open(path, "w") as archive:
        content = os.urandom(size)
        member = tarfile.TarInfo(name=f"random-{content[:4].hex()}.bin")
        member.size = size
        archive.addfile(member, BytesIO(content))
    return path


@dataclass
class ImageTools:
    """crane and cosign (v2 and v3) against local registries, with their own docker config."""

    workdir: Path
    insecure: bool = True
    ca_file: Path | None = None
    password: str = "labgate-test"  # noqa: S105 - COSIGN_PASSWORD of throwaway test keys

    def __post_init__(self) -> None:
        (self.workdir / "docker").mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "DOCKER_CONFIG": str(self.workdir / "docker"),
            "COSIGN_PASSWORD": self.password,
            "TUF_ROOT": str(self.workdir / "tuf"),
            "HOME": str(self.workdir),
        }
        if self.ca_file is not None:
            env["SSL_CERT_FILE"] = str(self.ca_file)
        return env

    def run(self, argv: list[str], *, timeout: float = 60.0) -> str:
        result = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False, cwd=self.workdir
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:3])} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}"
            )
        return result.stdout.strip()

    def crane(self, *args: str) -> str:
        flags = ["--insecure"] if self.insecure else []
        return self.run([str(tool("crane").binary()), *args, *flags])

    def login(self, host: str, username: str, password: str) -> None:
        """Write credentials for `host` into this tool set's docker config (crane and cosign read it)."""
        config_path = self.workdir / "docker" / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {"auths": {}}
        auth = base64.b64encode(f"{username}:{password}".encode()).decode()
        config["auths"][host] = {"auth": auth}
        config_path.write_text(json.dumps(config))

    def push_random_image(self, reference: str, *, platform: str | None = None) -> str:
        """Push a new single-layer image to `reference`; its digest."""
        layer = random_layer(self.workdir / f"layer-{secrets.token_hex(4)}.tar")
        self.crane("append", "-f", str(layer), "-t", reference)
        if platform is not None:
            self.crane("mutate", "--set-platform", platform, reference)
        return self.crane("digest", reference)

    def push_index(self, reference: str, manifests: list[str]) -> str:
        """Push a multi-platform index of `manifests` (by digest reference) to `reference`; its digest."""
        args = ["index", "append", "-t", reference]
        for manifest in manifests:
            args += ["-m", manifest]
        self.crane(*args)
        return self.crane("digest", reference)

    def cosign(self, version: str, *args: str) -> str:
        return self.run([str(tool(f"cosign-{version}").binary()), *args])

    def generate_key_pair(self, prefix: str, *, version: str = "v2") -> tuple[Path, str]:
        """A cosign key pair written as <prefix>.key/.pub; (private key path, public key PEM)."""
        self.cosign(version, "generate-key-pair", "--output-key-prefix", str(self.workdir / prefix))
        return self.workdir / f"{prefix}.key", (self.workdir / f"{prefix}.pub").read_text()

    def import_key_pair(self, prefix: str, private_pem: bytes, *, version: str = "v3") -> tuple[Path, str]:
        """Import an unencrypted PEM private key (RSA, ECDSA or Ed25519) as a cosign key pair."""
        source = self.workdir / f"{prefix}.source.pem"
        source.write_bytes(private_pem)
        self.cosign(
            version,
            "import-key-pair",
            "--key",
            str(source),
            "--output-key-prefix",
            str(self.workdir / prefix),
            "--yes",
        )
        return self.workdir / f"{prefix}.key", (self.workdir / f"{prefix}.pub").read_text()

    def sign(self, version: str, key: Path, image: str) -> None:
        """`cosign sign --key` offline: v2 writes the `.sig` tag, v3 a Sigstore bundle referrer."""
        flags = COSIGN_V2_SIGN_FLAGS if version == "v2" else COSIGN_V3_SIGN_FLAGS
        self.cosign(version, "sign", "--key", str(key), *flags, image)


@contextmanager
def running(registry: LocalRegistry) -> Iterator[LocalRegistry]:
    """Start `registry` and stop it (by pid) on the way out."""
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()
