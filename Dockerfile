# The labgate image: `labgate serve` (the admission webhook) and `labgate reconcile` (the tenant
# reconciler). The policies are not in the image: the chart ships them in a ConfigMap that the OPA
# sidecar loads, so the infra team changes rules without a new image.
#
#   docker build -t ghcr.io/labgate/labgate:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what `pip install .` needs (pyproject.toml names README.md as the long description).
COPY pyproject.toml README.md ./
COPY labgate ./labgate
COPY webhook ./webhook
COPY rbac ./rbac
# A numeric, unprivileged user, so that the pod's runAsNonRoot can verify it.
RUN pip install . \
    && rm -rf /src \
    && useradd --uid 65532 --user-group --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin labgate

WORKDIR /
USER 65532:65532
# The webhook's HTTPS port (LABGATE_PORT) and the reconciler's /metrics (--metrics-port in the chart).
EXPOSE 8443 8080
ENTRYPOINT ["labgate"]
CMD ["serve"]
