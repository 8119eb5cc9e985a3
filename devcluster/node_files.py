"""What a real node finds on disk when it starts: node_config's renders written into the node's state
directory, and the directories its mount namespace binds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from devcluster.node_config import (
    KERNEL_DEFAULTS,
    PRIVATE_DIRECTORIES,
    NodeLayout,
    cni_configuration,
    containerd_configuration,
    kube_proxy_configuration,
    kubelet_configuration,
    registry_hosts_toml,
)


@dataclass(frozen=True)
class NodeFacts:
    """What the node's files are made of, besides their paths."""

    node_name: str
    node_address: str
    pod_cidr: str
    cgroup_root: str
    sandbox_image: str
    registries: tuple[str, ...]
    ca_pem: bytes
    kube_proxy_kubeconfig: Path


def write_node_files(layout: NodeLayout, facts: NodeFacts) -> None:
    """Write every configuration file the node's processes read, and make the directories they use."""
    for directory in PRIVATE_DIRECTORIES:
        layout.private_directory(directory).mkdir(parents=True, exist_ok=True)
    layout.sysctl_dir.mkdir(parents=True, exist_ok=True)
    for key, value in KERNEL_DEFAULTS.items():
        (layout.sysctl_dir / key.replace("/", ".")).write_text(value + "\n")
    layout.containerd_config.parent.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(
        containerd_configuration(layout=layout, sandbox_image=facts.sandbox_image)
    )
    for registry in facts.registries:
        hosts = layout.registry_hosts / registry / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(registry_hosts_toml(registry))
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    cni = cni_configuration(pod_cidr=facts.pod_cidr, ipam_dir=layout.ipam_dir)
    (layout.cni_conf_dir / "10-labgate-pods.conflist").write_text(json.dumps(cni, indent=2))
    layout.client_ca_file.write_bytes(facts.ca_pem)
    kubelet = kubelet_configuration(
        layout=layout,
        node_address=facts.node_address,
        client_ca_file=layout.client_ca_file,
        cgroup_root=facts.cgroup_root,
    )
    layout.kubelet_config.write_text(yaml.safe_dump(kubelet))
    proxy = kube_proxy_configuration(
        kubeconfig=facts.kube_proxy_kubeconfig, node_name=facts.node_name, pod_cidr=facts.pod_cidr
    )
    layout.kube_proxy_config.write_text(yaml.safe_dump(proxy))
