"""config/kubernetes/: every manifest valid against the Kubernetes API's own schemas, offline,
and what a schema cannot see.

No cluster runs here (nor in CI): `kubernetes-validate` ships the OpenAPI schemas of each
Kubernetes release, and every manifest is validated strictly (an unknown or misspelt field is
an error) against the newest release it knows. Then the semantics: the probes ask paths the
proxy answers, the Service, autoscaler and disruption budget find the Deployment's pods, the
grace period covers the preStop sleep and the proxy's own shutdown grace, every Secret key
referenced is one the example Secret documents, the container matches the image the
Dockerfile builds, and the ConfigMap's streamfix.toml, with the environment the Deployment
gives it, is a configuration the proxy loads and serves with against a real Redis behind a
password.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from proxy.server.app import create_app
from proxy.settings.schema import ENVIRONMENT_KEYS, Settings
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.servers import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "config" / "kubernetes"
SECRET_EXAMPLE = MANIFESTS / "secret.example.yaml"
DOCKERFILE = ROOT / "Dockerfile"
# STREAMFIX_* variables the proxy reads besides the config keys' ones.
OTHER_VARIABLES = {"STREAMFIX_CONFIG", "STREAMFIX_API_KEYS", "STREAMFIX_RECEIPT_SECRET"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def kustomization() -> dict[str, Any]:
    (document,) = documents(MANIFESTS / "kustomization.yaml")
    return document


def resources() -> list[dict[str, Any]]:
    """Every object `kubectl apply -k config/kubernetes` creates."""
    return [doc for name in kustomization()["resources"] for doc in documents(MANIFESTS / name)]


def one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def proxy_deployment() -> dict[str, Any]:
    return one("Deployment", "streamfix")


def proxy_container() -> dict[str, Any]:
    (container,) = proxy_deployment()["spec"]["template"]["spec"]["containers"]
    return container


def secret_keys() -> set[str]:
    (secret,) = documents(SECRET_EXAMPLE)
    assert secret["kind"] == "Secret"
    return set(secret["stringData"])


def config_text() -> str:
    return one("ConfigMap", "streamfix-config")["data"]["streamfix.toml"]


# ── the schemas ──────────────────────────────────────────────────────────────

ALL_FILES = sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml")


def test_the_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    # A manifest left out of the list is never applied; the example Secret must never be (its
    # placeholders would become real keys).
    listed = kustomization()["resources"]
    assert sorted(listed) == sorted(set(ALL_FILES) - {SECRET_EXAMPLE.name})
    assert "namespace" not in kustomization()


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_manifest_is_valid_for_the_newest_kubernetes_the_validator_knows(name: str) -> None:
    version = latest_version()
    for document in documents(MANIFESTS / name):
        # Raises ValidationError naming the field; strict: no field the API does not know.
        kubernetes_validate.validate(document, version, strict=True)
        assert "namespace" not in document["metadata"]  # `kubectl apply -n` decides


def test_the_validator_catches_a_misspelt_field() -> None:
    # The check above is only worth something if a field the API does not know fails it.
    deployment = proxy_deployment()
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, latest_version(), strict=True)


# ── what a schema cannot check ───────────────────────────────────────────────


def test_the_probes_ask_the_proxys_own_health_routes_on_its_port() -> None:
    # A probe on a path the proxy does not answer would fail every pod (liveness: restarted in
    # a loop; readiness: never in the Service).
    container = proxy_container()
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    routes = {getattr(r, "path", None): r for r in create_app(Settings()).routes}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert "GET" in routes[get["path"]].methods  # type: ignore[attr-defined]
        (port,) = [p for p in container["ports"] if p["name"] == get["port"]]
        assert port["containerPort"] == image_port()


def prestop_seconds() -> int:
    command = proxy_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"  # the slim image's coreutils sleep; no shell needed
    return int(command[1])


def test_the_grace_period_covers_the_prestop_sleep_and_the_proxys_shutdown_grace(
    tmp_path: Path,
) -> None:
    # Kubernetes counts terminationGracePeriodSeconds from the start of preStop: a period
    # shorter than preStop + the proxy's own grace SIGKILLs streams the proxy meant to let
    # finish.
    settings = Settings.load(None, {"STREAMFIX_CONFIG": str(config_file(tmp_path))})
    grace = settings.server.shutdown_grace_seconds
    assert grace == Settings().server.shutdown_grace_seconds  # the documented default, kept
    period = proxy_deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert period > prestop_seconds() + grace
    assert prestop_seconds() >= 5  # endpoint removal reaches kube-proxy and ingresses in seconds


def test_the_keepalive_is_under_the_idle_timeouts_of_the_middle(tmp_path: Path) -> None:
    # ingress-nginx's proxy-read-timeout and cloud load balancers' idle timeout are 60 s.
    settings = Settings.load(None, {"STREAMFIX_CONFIG": str(config_file(tmp_path))})
    assert 0 < settings.server.keepalive_seconds <= 30


def pods_labels() -> dict[str, str]:
    return proxy_deployment()["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_the_service_autoscaler_and_disruption_budget_find_the_proxy_pods() -> None:
    labels = pods_labels()
    assert selects(proxy_deployment()["spec"]["selector"]["matchLabels"], labels)
    service = one("Service", "streamfix")
    assert selects(service["spec"]["selector"], labels)
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    budget = one("PodDisruptionBudget", "streamfix")
    assert selects(budget["spec"]["selector"]["matchLabels"], labels)
    autoscaler = one("HorizontalPodAutoscaler", "streamfix")
    target = autoscaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "streamfix")
    assert autoscaler["spec"]["minReplicas"] >= 2  # a budget of one unavailable leaves one
    assert "replicas" not in proxy_deployment()["spec"]  # the autoscaler owns it
    redis_pods = one("Deployment", "streamfix-redis")["spec"]["template"]["metadata"]["labels"]
    assert not selects(service["spec"]["selector"], redis_pods)
    assert not selects(budget["spec"]["selector"]["matchLabels"], redis_pods)


def secret_references() -> Iterator[tuple[str, dict[str, Any]]]:
    for resource in resources():
        if resource["kind"] != "Deployment":
            continue
        for container in resource["spec"]["template"]["spec"]["containers"]:
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    yield variable["name"], ref


def test_every_secret_key_referenced_is_documented_in_the_example_secret() -> None:
    # A required key the Secret lacks keeps the pod from starting (CreateContainerConfigError).
    references = list(secret_references())
    assert references
    for name, ref in references:
        assert ref["name"] == "streamfix-keys"
        assert ref["key"] in secret_keys(), name
    required = {ref["key"] for _, ref in references if not ref.get("optional")}
    assert required == {"STREAMFIX_RECEIPT_SECRET", "REDIS_PASSWORD"}
    assert secret_keys() == {ref["key"] for _, ref in references}  # and nothing unused
    (redis,) = one("Deployment", "streamfix-redis")["spec"]["template"]["spec"]["containers"]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"  # the same password


def test_the_container_is_the_image_the_dockerfile_builds() -> None:
    dockerfile = DOCKERFILE.read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user is not None
    pod = proxy_deployment()["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (int(user[1]), int(user[2]))
    assert pod["runAsNonRoot"] is True
    container = proxy_container()
    assert "command" not in container and "args" not in container  # ENTRYPOINT + CMD: serve
    assert container["ports"][0]["containerPort"] == image_port()
    locked = container["securityContext"]
    assert locked["readOnlyRootFilesystem"] is True
    assert locked["allowPrivilegeEscalation"] is False
    assert locked["capabilities"]["drop"] == ["ALL"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["STREAMFIX_CONFIG"] == f"{mounts['config']}/streamfix.toml"
    assert "/tmp" in mounts.values()  # the one writable place, as compose's tmpfs
    streamfix = {name for name in env if name.startswith("STREAMFIX_")}
    assert streamfix <= {*ENVIRONMENT_KEYS, *OTHER_VARIABLES}, streamfix
    resources = container["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "512Mi"}  # the stated start


def image_port() -> int:
    found = re.search(r"^EXPOSE (\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert found is not None
    return int(found[1])


def config_file(directory: Path) -> Path:
    """The ConfigMap's streamfix.toml as a file (the pods see it at /etc/streamfix)."""
    path = directory / "streamfix.toml"
    path.write_text(config_text())
    return path


def expanded(template: str, environ: dict[str, str]) -> str:
    """Kubernetes' `$(NAME)` expansion of an env value (`$$` escapes a dollar)."""

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return environ.get(match[1], match[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", substitute, template)


def pod_environment(secret: dict[str, str], redis_host: str) -> dict[str, str]:
    """The proxy container's environment as the kubelet builds it, in order, with `secret` as
    the Secret's data and the Redis Service's name resolved to `redis_host`."""
    environ: dict[str, str] = {}
    for variable in proxy_container()["env"]:
        if "valueFrom" in variable:
            ref = variable["valueFrom"]["secretKeyRef"]
            if ref["key"] in secret:
                environ[variable["name"]] = secret[ref["key"]]
            else:
                assert ref.get("optional"), ref
        else:
            environ[variable["name"]] = expanded(variable["value"], environ)
    store = environ["STREAMFIX_RECEIPTS_STORE"]
    service = one("Service", "streamfix-redis")
    address = f"streamfix-redis:{service['spec']['ports'][0]['port']}"
    assert address in store  # the Redis of redis.yaml, by its Service's name and port
    environ["STREAMFIX_RECEIPTS_STORE"] = store.replace(address, redis_host)
    return environ


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


def require_password(redis: RedisServer, password: str) -> None:
    """What redis.yaml's `--requirepass` does, on the running test server."""
    command = f"CONFIG SET requirepass {password}\r\n".encode()
    with socket.create_connection(("127.0.0.1", redis.port), timeout=2) as sock:
        sock.sendall(command)
        assert sock.recv(64).startswith(b"+OK")


def test_the_configmap_loads_with_the_pods_environment_and_serves_ready_on_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # The ConfigMap's TOML must be a configuration the proxy accepts (a typo'd key refuses to
    # start every pod), and the store URL the Deployment composes from the Secret must reach
    # a Redis that requires the password, or every pod serves without receipts (/readyz says
    # `"store": false`, which the operator's alert on streamfix_store_up also sees).
    password = "0123456789abcdef" * 4  # hex, as secret.example.yaml asks
    require_password(redis_server, password)
    secret = {"STREAMFIX_RECEIPT_SECRET": "f" * 64, "REDIS_PASSWORD": password}
    environ = pod_environment(secret, f"127.0.0.1:{redis_server.port}")
    environ["STREAMFIX_CONFIG"] = str(config_file(tmp_path))
    settings = Settings.load(None, environ)
    assert settings.receipts.store.startswith("redis://")
    assert settings.server.workers == 1
    with serve_in_thread(create_app(settings)) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["store"] is True

    wrong = {**secret, "REDIS_PASSWORD": "f" * 64}
    environ = pod_environment(wrong, f"127.0.0.1:{redis_server.port}")
    environ["STREAMFIX_CONFIG"] = str(config_file(tmp_path))
    with serve_in_thread(create_app(Settings.load(None, environ))) as url:
        ready = httpx.get(f"{url}/readyz")
        # Still in rotation (a receipts outage is not a full one), and it says so.
        assert (ready.status_code, ready.json()["store"]) == (200, False)
