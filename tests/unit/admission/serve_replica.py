"""A child process for tests/unit/admission/test_serve_memory.py: the admission port served as
`labgate serve` serves it (admission_server_config, run_servers), the app without a cluster.

    python -m tests.unit.admission.serve_replica PKI_DIR PORT
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

from devcluster.processes import free_port
from tests.unit.apps import app_without_cluster
from webhook.http_guard import admission_server_config
from webhook.servers import run_servers
from webhook.settings import Settings


def main(pki: Path, port: int) -> None:
    settings = Settings(
        opa_url=f"http://127.0.0.1:{free_port()}",
        host="127.0.0.1",
        port=port,
        tls_cert_file=pki / "tls.crt",
        tls_key_file=pki / "tls.key",
        tls_client_ca_file=pki / "client-ca.crt",
    )
    run_servers([uvicorn.Server(admission_server_config(app_without_cluster(settings), settings))])


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
