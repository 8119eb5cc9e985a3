# The labgate image: `labgate serve` (the admission webhook) and `labgate reconcile` (the tenant
# reconciler). The policies are not in the image: the chart ships them in a ConfigMap that the OPA
# sidecar loads, so the infra team changes rules without a new image.
#
#   docker build -t ghcr.io/labgate/labgate:0.1.0 .
#
# Without Docker, toolchain/build-image.sh carries out these same instructions on a Debian base
# (debootstrap, umoci; see docs/operations.md). It understands FROM python:<version>, ENV, WORKDIR,
# COPY src... dest, RUN, USER, EXPOSE and the JSON form of ENTRYPOINT and CMD: keep to those.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what `pip install .` needs (pyproject.toml names README.md as the long description), and the
# lock file that pins every dependency (and the build backend) to the versions the tests ran with.
# Not devcluster/ (the local control plane is a development tool) and not tests/.
COPY pyproject.toml README.md toolchain/image-constraints.txt ./
COPY cli ./cli
COPY labgate ./labgate
COPY webhook ./webhook
COPY rbac ./rbac
# A numeric, unprivileged user and group, so that the pod's runAsNonRoot can verify it.
RUN PIP_CONSTRAINT=/src/image-constraints.txt pip install . \
    && rm -rf /src \
    && groupadd --gid 65532 labgate \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin labgate

WORKDIR /
USER 65532:65532
# The webhook's HTTPS port (LABGATE_PORT) and the reconciler's /metrics (--metrics-port in the chart).
EXPOSE 8443 8080
ENTRYPOINT ["labgate"]
CMD ["serve"]
