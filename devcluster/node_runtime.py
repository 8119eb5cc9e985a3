"""What the real node's container runtime holds, read from containerd itself (`ctr -n k8s.io`, the
namespace the CRI plugin keeps the kubelet's images in) rather than from what the API reports.

    store = NodeImageStore.read(cluster.node)
    store.digest_of("host/labgate/opa@sha256:...")   # the digest the image record points at, or None
    store.holds("sha256:...")                        # an image record or a content blob with it
    task_pid(cluster.node, "containerd://0f3c...")   # the host pid of a running container's process

The node has no pid namespace of its own: the pid containerd reports for a container's task is the
host's, so a test can signal it as the kernel would (an OOM kill, a crash).

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


def task_pid(node: HasRuntime, container_id: str) -> int:
    """The host pid of the running task of `container_id` (as a pod's status names it,
    `containerd://<id>`, or the bare id), from containerd's own task list."""
    wanted = container_id.removeprefix("containerd://")
    listed = node.ctr("tasks", "ls")
    if listed.returncode != 0:
        raise RuntimeError(f"ctr tasks ls: {listed.stderr.strip()}")
    # TASK PID STATUS, one task a line after the header.
    for line in listed.stdout.splitlines()[1:]:
        columns = line.split()
        if len(columns) >= 3 and columns[0] == wanted and columns[2] == "RUNNING":
            return int(columns[1])
    raise LookupError(f"no running task {wanted} on the node: {listed.stdout}")
