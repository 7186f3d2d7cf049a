"""The Kubernetes example under deploy/kubernetes/: valid against the API schemas, and consistent
(turnout's config loads, its selector finds the workers, its service account may watch pods)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from turnout.config import build_config
from turnout.demo_model import path as demo_path
from turnout.plugin_loader import load_plugins
from turnout.plugins.discovery.kubernetes import KubernetesProvider

from ..conftest import REPO_ROOT

MANIFESTS = sorted((REPO_ROOT / "deploy" / "kubernetes").glob("*.yaml"))
#: The oldest Kubernetes release the example is checked against.
KUBERNETES_VERSION = "1.29"


def documents() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, doc)
        for path in MANIFESTS
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


@pytest.mark.parametrize(
    "document",
    [pytest.param(doc, id=f"{path.name}:{doc['kind']}") for path, doc in documents()],
)
def test_each_manifest_matches_the_kubernetes_schema(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_a_broken_manifest_is_caught() -> None:
    (deployment,) = by_kind("Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "three"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_example_fits_together(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {doc["kind"] for _, doc in documents()} >= {
        "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "StatefulSet",
        "ConfigMap",
    }  # fmt: skip
    (config_map,) = by_kind("ConfigMap")
    monkeypatch.setenv("TURNOUT_API_KEY", "k")
    data = yaml.safe_load(config_map["data"]["turnout.yaml"])
    for model in data["models"].values():
        assert model["tokenizer_path"].startswith("/models/")  # the mounted volume
        model["tokenizer_path"] = str(demo_path())  # a directory that exists here
    config = build_config(data)
    (entry,) = config.discovery
    assert entry.provider == "kubernetes"
    provider = load_plugins().discovery.create(entry.provider, **entry.options)
    assert isinstance(provider, KubernetesProvider)

    (workers,) = by_kind("StatefulSet")
    pod = workers["spec"]["template"]
    ready_pod = {
        "metadata": {**pod["metadata"], "name": "sglang-worker-0", "uid": "u"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    wanted = dict(pair.split("=") for pair in provider.selector.split(","))
    assert wanted.items() <= pod["metadata"]["labels"].items()
    _, worker = provider.pod_worker(ready_pod)
    assert worker is not None
    ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert worker.url == f"grpc://10.0.0.9:{ports.pop()}"
    assert worker.model in config.models

    (deployment,) = by_kind("Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    (binding,) = by_kind("RoleBinding")
    (role,) = by_kind("Role")
    assert {"kind": "ServiceAccount", "name": account, "namespace": "inference"} in binding[
        "subjects"
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (rule,) = role["rules"]
    assert "pods" in rule["resources"]
    assert {"get", "list", "watch"} <= set(rule["verbs"])
    namespaces = {doc["metadata"].get("namespace") for _, doc in documents()} - {None}
    assert namespaces == {"inference"}
