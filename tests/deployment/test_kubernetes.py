"""deploy/kubernetes/ is valid Kubernetes (offline, against the schemas kubernetes-validate
ships) and agrees with what the processes need: probes on our probe endpoints, a worker grace
period that covers its warm shutdown, several leaderless beats, secrets from the Secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.34.0"
SECRETS = {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SECRET_KEY", "FLOWER_BASIC_AUTH"}


def _resources() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, resource)
        for path in sorted(MANIFESTS.glob("*.yaml"))
        for resource in yaml.safe_load_all(path.read_text())
        if resource
    ]


def _deployment(component: str) -> dict[str, Any]:
    (found,) = [
        resource
        for _, resource in _resources()
        if resource["kind"] == "Deployment"
        and resource["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


def _container(resource: dict[str, Any]) -> dict[str, Any]:
    (container,) = resource["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize(
    ("path", "resource"), _resources(), ids=lambda v: v.name if isinstance(v, Path) else ""
)
def test_each_resource_is_valid_kubernetes(path: Path, resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_every_process_is_there_with_requests_and_secrets_from_the_secret() -> None:
    kinds = {(resource["kind"], resource["metadata"]["name"]) for _, resource in _resources()}
    assert {
        ("Deployment", "clusterjobs-web"),
        ("Service", "clusterjobs-web"),
        ("Deployment", "clusterjobs-beat"),
        ("Deployment", "clusterjobs-worker"),
        ("Deployment", "clusterjobs-flower"),
        ("Job", "clusterjobs-migrate"),
        ("Secret", "clusterjobs-secrets"),
        ("ConfigMap", "clusterjobs-config"),
    } <= kinds
    config = next(r for _, r in _resources() if r["kind"] == "ConfigMap")
    assert not SECRETS & set(config["data"]), "secrets belong in the Secret"
    for _, resource in _resources():
        if resource["kind"] not in ("Deployment", "Job"):
            continue
        container = _container(resource)
        assert container["resources"]["requests"]["cpu"]
        assert container["resources"]["requests"]["memory"]
        assert {"secretRef": {"name": "clusterjobs-secrets"}} in container["envFrom"]
        assert "env" not in container, "no literal settings: the ConfigMap and the Secret"


def test_the_web_is_probed_on_livez_and_readyz() -> None:
    container = _container(_deployment("web"))
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    from jobs.web.probes import PROBES

    assert {"/livez", "/readyz"} <= set(PROBES)


def test_beats_are_several_and_never_fewer_during_a_rollout() -> None:
    beat = _deployment("beat")
    assert beat["spec"]["replicas"] >= 2
    assert beat["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert _container(beat)["command"][:4] == ["celery", "-A", "project", "beat"]


def test_the_worker_gets_sigterm_itself_and_time_for_its_warm_shutdown() -> None:
    """Exec form: celery is PID 1 and gets the SIGTERM (its pool processes are not signalled,
    as with systemd's KillMode=mixed); the grace covers the continuous jobs' 10 s hand-over
    and matches compose's stop_grace_period."""
    worker = _deployment("worker")
    command = _container(worker)["command"]
    assert command[:4] == ["celery", "-A", "project", "worker"]
    assert "lifecycle" not in _container(worker)
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    grace = int(compose["services"]["worker-1"]["stop_grace_period"].rstrip("s"))
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace >= 10


def test_migrations_run_as_a_job() -> None:
    (job,) = [r for _, r in _resources() if r["kind"] == "Job"]
    assert _container(job)["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
