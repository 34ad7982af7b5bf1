"""Deployment files agree with the code: every queue has a pool that serves it and scales on it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from workers import names

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _queues_in(args: list[str]) -> set[str]:
    return set(args[args.index("--queues") + 1].split(",")) if "--queues" in args else set()


@pytest.mark.timeout(60)
def test_kustomize_base_has_a_scaling_pool_for_every_queue():
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render infra/k8s (it renders offline)"
    rendered = subprocess.run([kubectl, "kustomize", str(INFRA / "k8s" / "base")], capture_output=True, text=True,
                              check=True, timeout=60).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    served: dict[str, str] = {}
    for d in documents:
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("worker-"):
            for queue in _queues_in(d["spec"]["template"]["spec"]["containers"][0]["args"]):
                assert queue not in served, f"{queue} is served by two pools"
                served[queue] = d["metadata"]["name"]
    assert set(served) == set(names.ALL_QUEUES)
    scaled = {d["spec"]["scaleTargetRef"]["name"]: {t["metadata"]["listName"] for t in d["spec"]["triggers"]}
              for d in documents if d["kind"] == "ScaledObject"}
    for queue, deployment in served.items():
        assert queue in scaled[deployment], f"{deployment} does not scale on {queue}"
    assert all(d["metadata"]["namespace"] == "headwater" for d in documents if d["kind"] != "Namespace")
    (beat,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"  # one sweeper source


def test_compose_runs_a_worker_for_every_queue():
    compose = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    served = set()
    for service in compose["services"].values():
        served |= _queues_in(service.get("command", []))
    assert served == set(names.ALL_QUEUES)
    assert compose["services"]["beat"]["command"][0] == "beat"
    serve = compose["services"]["serve"]
    assert serve["command"][0] == "serve" and "postgres" in serve["environment"]["HEADWATER_DATABASE_URL"]
    assert serve["ports"] == ["127.0.0.1:8080:8080"]
