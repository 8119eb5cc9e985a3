"""What the real node's container runtime holds, read from containerd itself (`ctr -n k8s.io`, the
namespace the CRI plugin keeps the kubelet's images in) rather than from what the API reports.

    store = NodeImageStore.read(cluster.node)
    store.digest_of("host/labgate/opa@sha256:...")   # the digest the image record points at, or None
    store.holds("sha256:...")                        # an image record or a content blob with it

A pull by digest leaves an image record named by the reference and the manifest's blob in the
content store; an image that was never pulled leaves neither.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Protocol


class HasRuntime(Protocol):
    def ctr(self, *args: str, namespace: str = "k8s.io") -> subprocess.CompletedProcess[str]: ...


@dataclass(frozen=True)
class NodeImageStore:
    """containerd's image records (name -> target digest) and content digests, as read at one moment."""

    images: dict[str, str]
    content: frozenset[str]

    @classmethod
    def read(cls, node: HasRuntime) -> NodeImageStore:
        listed = node.ctr("images", "ls")
        if listed.returncode != 0:
            raise RuntimeError(f"ctr images ls: {listed.stderr.strip()}")
        images: dict[str, str] = {}
        # REF TYPE DIGEST SIZE PLATFORMS LABELS, one image record a line after the header.
        for line in listed.stdout.splitlines()[1:]:
            columns = line.split()
            if len(columns) >= 3:
                images[columns[0]] = columns[2]
        blobs = node.ctr("content", "ls", "-q")
        if blobs.returncode != 0:
            raise RuntimeError(f"ctr content ls: {blobs.stderr.strip()}")
        return cls(images, frozenset(blobs.stdout.split()))

    def digest_of(self, reference: str) -> str | None:
        """The digest the record named `reference` points at, or None when there is no such record."""
        return self.images.get(reference)

    def holds(self, digest: str) -> bool:
        """Whether anything of `digest` is on the node: an image record pointing at it, or its blob."""
        return digest in self.content or digest in self.images.values()
