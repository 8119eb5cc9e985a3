#!/usr/bin/env bash
# Build the labgate container image without Docker: the Dockerfile's instructions carried out on a
# Debian root file system (debootstrap --variant=minbase) and packed as an OCI image with umoci.
#
#   sudo toolchain/build-image.sh     # prints the OCI archive; cached by a hash of the inputs
#   ctr image import --base-name ghcr.io/labgate/labgate <archive>
#
# Needs root and Debian's debootstrap and umoci (apt-get install debootstrap umoci). The Debian base,
# the pinned wheels (toolchain/image-constraints.txt) and the built images are cached in
# ~/.cache/labgate (image-base-<release>, image-wheels-<hash>, images/<hash>), never in the repository.
# Details: devcluster/image.py and docs/operations.md.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
if [[ -x "$repo/.venv/bin/python" && -z "${PYTHON:-}" ]]; then python="$repo/.venv/bin/python"; fi
cd "$repo"
exec env PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$python" -m devcluster.image build "$@"
