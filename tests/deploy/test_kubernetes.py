"""The Kubernetes manifests (deploy/kubernetes), checked without a cluster.

Each overlay (keda, hpa) is rendered twice: by ``kubectl kustomize`` (kustomize v4 or later) and
by ``render`` below, a small Python kustomize that knows the few features the manifests use. The
two renderings must agree, and both must pass every check: built-in objects validate against the
Kubernetes schema (``kubernetes-validate``, schemas bundled, offline), KEDA's objects (a CRD the
core schemas lack) are checked field by field, every Secret and ConfigMap a pod or autoscaler
names exists with the keys it reads, and each Deployment has what running Herald takes (exec-form
command, grace period above HERALD_GRACE_PERIOD_S, probes on the real endpoints, resources,
scrape annotations, valid HERALD_* settings).
"""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from herald.settings import Settings

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
KUSTOMIZATIONS = sorted(path.parent for path in KUBERNETES.rglob("kustomization.yaml"))
OVERLAYS = ("keda", "hpa")
RENDERERS = ("python", "kubectl")
KUBERNETES_VERSION = "1.30.0"
"""Oldest Kubernetes the manifests are validated against (policy/v1, autoscaling/v2 are GA)."""

SERVICES = {"api": 8000, "dispatcher": 9101, "sender": 9102, "scheduler": 9103}
"""Each Deployment and the port of its /healthz and /metrics."""
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
NOT_NAMESPACED = frozenset({"Namespace"})
GENERATED_SUFFIX = re.compile(r"-[a-z0-9]{10}$")

Manifest = dict[str, Any]


# --- a small kustomize ----------------------------------------------------------------------------

def _kustomization(directory: Path) -> dict[str, Any]:
    data = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert data["kind"] == "Kustomization", directory
    return dict(data)


def _env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value
    return pairs


def _generated(directory: Path, generator: dict[str, Any], kind: str) -> Manifest:
    data: dict[str, str] = {}
    for env in generator.get("envs", []):
        data.update(_env_file(directory / env))
    for entry in generator.get("files", []):
        key, _, source = entry.rpartition("=")
        data[key or Path(source).name] = (directory / source).read_text()
    manifest: Manifest = {"apiVersion": "v1", "kind": kind, "metadata": {"name": generator["name"]}}
    if kind == "Secret":
        manifest["type"] = "Opaque"
        manifest["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        manifest["data"] = data
    return manifest


def _set_images(manifest: Manifest, images: list[dict[str, str]]) -> None:
    containers = manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    for container in containers:
        for image in images:
            if container["image"] == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def render(directory: Path) -> list[Manifest]:
    """``kustomize build`` for what these kustomizations use: resources (files and directories),
    namespace, images, and ConfigMap/Secret generators (names left without their hash)."""
    spec = _kustomization(directory)
    manifests: list[Manifest] = []
    for resource in spec.get("resources", []):
        path = directory / resource
        manifests += render(path) if path.is_dir() else [
            doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    manifests += [_generated(directory, g, "ConfigMap") for g in spec.get("configMapGenerator", [])]
    manifests += [_generated(directory, g, "Secret") for g in spec.get("secretGenerator", [])]
    for manifest in manifests:
        _set_images(manifest, spec.get("images", []))
        if "namespace" in spec and manifest["kind"] not in NOT_NAMESPACED:
            manifest["metadata"]["namespace"] = spec["namespace"]
    return manifests


def _kubectl_with_kustomize() -> str | None:
    binary = shutil.which("kubectl")
    if binary is None:
        return None
    version = subprocess.run([binary, "version", "--client"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    found = re.search(r"Kustomize Version: v(\d+)", version)
    return binary if found and int(found[1]) >= 4 else None


def _unhashed(manifests: list[Manifest]) -> list[Manifest]:
    """kubectl's rendering with the generated names' hash suffixes taken off, everywhere."""
    hashed = {m["metadata"]["name"] for m in manifests if m["kind"] in ("ConfigMap", "Secret")
              and GENERATED_SUFFIX.search(m["metadata"]["name"])}
    text = yaml.safe_dump_all(manifests)
    for name in hashed:
        text = re.sub(rf"\b{re.escape(name)}\b", GENERATED_SUFFIX.sub("", name), text)
    unhashed = [doc for doc in yaml.safe_load_all(text) if doc]
    for secret in unhashed:
        if secret["kind"] == "Secret":  # kubectl wraps long base64 values over several lines
            secret["data"] = {k: base64.b64encode(base64.b64decode(v)).decode()
                              for k, v in secret["data"].items()}
    return unhashed


# --- fixtures --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/kubernetes with every secrets/*.example filled in, as an operator would."""
    root = tmp_path_factory.mktemp("kubernetes") / "kubernetes"
    shutil.copytree(KUBERNETES, root)
    for example in root.rglob("secrets/*.example"):
        shutil.copy(example, example.with_suffix(""))
    return root


@pytest.fixture(scope="module")
def renderings(checkout: Path) -> dict[tuple[str, str], list[Manifest]]:
    found = {(overlay, "python"): render(checkout / overlay) for overlay in OVERLAYS}
    kubectl = _kubectl_with_kustomize()
    for overlay in OVERLAYS if kubectl else ():
        result = subprocess.run([kubectl, "kustomize", str(checkout / overlay)],  # type: ignore[list-item]
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        found[(overlay, "kubectl")] = _unhashed(rendered)
        found[(overlay, "kubectl-hashed")] = rendered
    return found


@pytest.fixture(params=[(o, r) for o in OVERLAYS for r in RENDERERS], ids=lambda p: "-".join(p))
def rendered(request: pytest.FixtureRequest,
             renderings: dict[tuple[str, str], list[Manifest]]) -> list[Manifest]:
    if request.param not in renderings:
        pytest.skip("kubectl with kustomize v4+ is not installed: only the Python rendering ran")
    return renderings[request.param]


def _by_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def _pod_spec(manifests: list[Manifest], service: str) -> dict[str, Any]:
    return dict(_by_kind(manifests, "Deployment")[service]["spec"]["template"]["spec"])


def _container(manifests: list[Manifest], service: str) -> dict[str, Any]:
    (container,) = _pod_spec(manifests, service)["containers"]
    return dict(container)


# --- the files -------------------------------------------------------------------------------------

def test_every_manifest_parses() -> None:
    files = sorted(KUBERNETES.rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), path
            assert {"apiVersion", "kind"} <= set(doc), path
            assert doc["kind"] == "Kustomization" or doc["metadata"]["name"], path


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_each_kustomization_lists_every_file_beside_it(directory: Path) -> None:
    spec = _kustomization(directory)
    listed = [entry for entry in spec.get("resources", []) if (directory / entry).is_file()]
    beside = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == beside
    for entry in spec.get("resources", []):
        assert (directory / entry).exists(), f"{directory.name} lists missing {entry}"
    for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
        sources = generator.get("envs", []) + [f.rpartition("=")[2] for f in generator.get("files", [])]
        for source in sources:
            shipped = directory / source
            if source.startswith("secrets/"):  # kept out of git: an example must show the format
                shipped = shipped.with_name(shipped.name + ".example")
            assert shipped.is_file(), f"{directory.name}: {generator['name']} reads {source}"


def _git_ignores(path: Path) -> bool:
    result = subprocess.run(["git", "check-ignore", "-q", str(path.relative_to(REPO))], cwd=REPO,
                            capture_output=True, timeout=30, check=False)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def test_real_secrets_stay_out_of_git_and_their_examples_in() -> None:
    examples = sorted((KUBERNETES / "base" / "secrets").glob("*.example"))
    assert len(examples) == 3
    for example in examples:
        assert not _git_ignores(example), example.name
        assert _git_ignores(example.with_suffix("")), example.with_suffix("").name


def test_both_renderers_agree(renderings: dict[tuple[str, str], list[Manifest]]) -> None:
    if ("keda", "kubectl") not in renderings:
        pytest.skip("kubectl with kustomize v4+ is not installed: only the Python rendering ran")
    for overlay in OVERLAYS:
        def key(manifest: Manifest) -> tuple[str, str]:
            return manifest["kind"], manifest["metadata"]["name"]
        ours = sorted(renderings[(overlay, "python")], key=key)
        theirs = sorted(renderings[(overlay, "kubectl")], key=key)
        assert [key(m) for m in ours] == [key(m) for m in theirs], overlay
        for mine, kubectls in zip(ours, theirs, strict=True):
            assert mine == kubectls, f"{overlay}: {key(mine)} differs"


def test_kubectl_rewrote_every_generated_name(
        renderings: dict[tuple[str, str], list[Manifest]]) -> None:
    """Config and two of the Secrets carry a content hash, so changing them rolls the pods."""
    if ("keda", "kubectl-hashed") not in renderings:
        pytest.skip("kubectl with kustomize v4+ is not installed: only the Python rendering ran")
    for overlay in OVERLAYS:
        manifests = renderings[(overlay, "kubectl-hashed")]
        names = {m["metadata"]["name"] for m in manifests if m["kind"] in ("ConfigMap", "Secret")}
        assert "herald-stores" in names  # named by KEDA: no hash
        assert {GENERATED_SUFFIX.sub("", n) for n in names if GENERATED_SUFFIX.search(n)} == {
            "herald-config", "herald-fcm", "herald-bootstrap-api-key"}
        _check_references(manifests)


# --- schemas ---------------------------------------------------------------------------------------

def test_built_in_objects_validate_against_the_kubernetes_schema(rendered: list[Manifest]) -> None:
    for manifest in rendered:
        if manifest["apiVersion"].startswith("keda.sh/"):
            continue
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_schema_validator_rejects_a_misspelt_field(rendered: list[Manifest]) -> None:
    broken = copy.deepcopy(_by_kind(rendered, "Deployment")["sender"])
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_keda_objects_are_well_formed(rendered: list[Manifest]) -> None:
    scaled = _by_kind(rendered, "ScaledObject")
    if not scaled:
        assert _by_kind(rendered, "HorizontalPodAutoscaler"), "senders need an autoscaler"
        return
    sender = scaled["sender"]
    assert sender["apiVersion"] == "keda.sh/v1alpha1"
    spec = sender["spec"]
    assert set(spec) <= {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
                         "cooldownPeriod", "advanced", "triggers", "fallback", "idleReplicaCount"}
    assert spec["scaleTargetRef"] == {"name": "sender"}
    assert 2 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    (queue,) = [t for t in spec["triggers"] if t["type"] == "rabbitmq"]
    assert queue["metadata"]["queueName"] == "herald.chunks"
    assert queue["metadata"]["mode"] == "QueueLength"
    assert queue["metadata"]["protocol"] == "amqp"
    assert int(queue["metadata"]["value"]) > 0
    assert all(isinstance(v, str) for t in spec["triggers"] for v in t["metadata"].values()), (
        "KEDA trigger metadata values are strings")
    auth = _by_kind(rendered, "TriggerAuthentication")[queue["authenticationRef"]["name"]]
    assert auth["apiVersion"] == "keda.sh/v1alpha1"
    assert [ref["parameter"] for ref in auth["spec"]["secretTargetRef"]] == ["host"]


# --- references ------------------------------------------------------------------------------------

def _secret_keys(manifests: list[Manifest]) -> dict[str, set[str]]:
    return {name: keys for (kind, name), keys in _keys(manifests).items() if kind == "Secret"}


def _volume_references(pod: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            yield "Secret", volume["secret"]["secretName"], None
        if "configMap" in volume:
            yield "ConfigMap", volume["configMap"]["name"], None


def _env_references(container: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    for source in container.get("envFrom", []):
        for kind, field in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
            if field in source:
                yield kind, source[field]["name"], None
    for env in container.get("env", []):
        for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            ref = env.get("valueFrom", {}).get(field)
            if ref:
                yield kind, ref["name"], ref["key"]


def _references(pod: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    """(kind, name, key or None) of every ConfigMap and Secret a pod spec reads."""
    yield from _volume_references(pod)
    for container in pod["containers"]:
        yield from _env_references(container)


def _keys(manifests: list[Manifest]) -> dict[tuple[str, str], set[str]]:
    """(kind, name) of every ConfigMap and Secret in the set -> its keys."""
    return {(m["kind"], m["metadata"]["name"]): set(m.get("data", {})) | set(m.get("stringData", {}))
            for m in manifests if m["kind"] in ("ConfigMap", "Secret")}


def _check_references(manifests: list[Manifest]) -> None:
    keys = _keys(manifests)
    for deployment in _by_kind(manifests, "Deployment").values():
        for kind, name, key in _references(deployment["spec"]["template"]["spec"]):
            assert (kind, name) in keys, (
                f"{deployment['metadata']['name']} reads {kind} {name}, which is not in the set")
            assert key is None or key in keys[(kind, name)], f"{kind} {name} has no key {key}"
    for auth in _by_kind(manifests, "TriggerAuthentication").values():
        for ref in auth["spec"]["secretTargetRef"]:
            assert ref["key"] in keys.get(("Secret", ref["name"]), set()), ref
    deployments = _by_kind(manifests, "Deployment")
    for scaler in [*_by_kind(manifests, "ScaledObject").values(),
                   *_by_kind(manifests, "HorizontalPodAutoscaler").values()]:
        assert scaler["spec"]["scaleTargetRef"]["name"] in deployments


def test_every_secret_and_config_map_named_exists(rendered: list[Manifest]) -> None:
    _check_references(rendered)


def test_selectors_pick_exactly_their_pods(rendered: list[Manifest]) -> None:
    pods = {name: d["spec"]["template"]["metadata"]["labels"]
            for name, d in _by_kind(rendered, "Deployment").items()}
    for name, deployment in _by_kind(rendered, "Deployment").items():
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pods[name].items()
    selectors = [(f"PDB {n}", p["spec"]["selector"]["matchLabels"])
                 for n, p in _by_kind(rendered, "PodDisruptionBudget").items()]
    selectors += [(f"Service {n}", s["spec"]["selector"])
                  for n, s in _by_kind(rendered, "Service").items()]
    for what, selector in selectors:
        matched = [name for name, labels in pods.items() if selector.items() <= labels.items()]
        assert len(matched) == 1, f"{what} selects {matched}"
    assert set(_by_kind(rendered, "PodDisruptionBudget")) == set(SERVICES)


def test_the_api_service_reaches_the_api_port(rendered: list[Manifest]) -> None:
    (port,) = _by_kind(rendered, "Service")["api"]["spec"]["ports"]
    named = {p["name"]: p["containerPort"] for p in _container(rendered, "api")["ports"]}
    assert named[port["targetPort"]] == SERVICES["api"]


# --- what running Herald takes ---------------------------------------------------------------------

@pytest.mark.parametrize("service", SERVICES)
def test_exec_form_command_from_the_one_image(rendered: list[Manifest], service: str) -> None:
    container = _container(rendered, service)
    assert container["command"] == ["python", "-m", f"services.{service}"]
    assert "args" not in container
    assert container["image"] == f"herald:{VERSION}"


def _settings_env(rendered: list[Manifest], service: str) -> dict[str, str]:
    """The HERALD_* environment the container gets from its ConfigMap, Secret and env."""
    container = _container(rendered, service)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(_by_kind(rendered, "ConfigMap")[source["configMapRef"]["name"]]["data"])
        if "secretRef" in source:
            data = _by_kind(rendered, "Secret")[source["secretRef"]["name"]]["data"]
            env.update({k: base64.b64decode(v).decode() for k, v in data.items()})
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def _mounted_secret_file(rendered: list[Manifest], service: str, path: str) -> tuple[str, str]:
    """(Secret, key) behind a file path in the container, or a failed assertion."""
    pod, container = _pod_spec(rendered, service), _container(rendered, service)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        directory, _, key = path.rpartition("/")
        if directory == mount["mountPath"] and "secret" in volumes[mount["name"]]:
            assert mount.get("readOnly") is True
            return volumes[mount["name"]]["secret"]["secretName"], key
    raise AssertionError(f"{service}: nothing mounts {path}")


@pytest.mark.parametrize("service", SERVICES)
def test_settings_are_valid_herald_settings(rendered: list[Manifest], service: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    env = _settings_env(rendered, service)
    fields = {f"HERALD_{name.upper()}" for name in Settings.model_fields}
    unknown = {k for k in env if k.startswith("HERALD_")} - fields
    assert not unknown, f"{service}: misspelt settings {unknown}"
    secret, key = _mounted_secret_file(rendered, service, env["HERALD_FCM_CREDENTIALS"])
    assert key in _secret_keys(rendered)[secret]
    for name in list(os.environ):
        if name.startswith("HERALD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    credentials = tmp_path / "service-account.json"  # the mounted files, here
    credentials.write_text("{}")
    monkeypatch.setenv("HERALD_FCM_CREDENTIALS", str(credentials))
    if "HERALD_BOOTSTRAP_API_KEY_FILE" in env:
        bootstrap = tmp_path / "api-key"
        bootstrap.write_text("hrld_bootstrap_" + "s" * 43 + "\n")
        monkeypatch.setenv("HERALD_BOOTSTRAP_API_KEY_FILE", str(bootstrap))
    settings = Settings()
    port = settings.api_port if service == "api" else settings.metrics_port
    assert port == SERVICES[service]
    assert settings.mongodb_database == "herald"


def test_the_api_reads_its_bootstrap_key_from_a_mounted_secret(rendered: list[Manifest]) -> None:
    env = _settings_env(rendered, "api")
    assert "HERALD_BOOTSTRAP_API_KEY" not in env, "a key in the environment leaks into /proc"
    secret, key = _mounted_secret_file(rendered, "api", env["HERALD_BOOTSTRAP_API_KEY_FILE"])
    assert key in _secret_keys(rendered)[secret]
    for worker in ("dispatcher", "sender", "scheduler"):
        assert "HERALD_BOOTSTRAP_API_KEY_FILE" not in _settings_env(rendered, worker)


@pytest.mark.parametrize("service", SERVICES)
def test_grace_period_outlasts_herald_s_own(rendered: list[Manifest], service: str) -> None:
    pod, container = _pod_spec(rendered, service), _container(rendered, service)
    grace_s = float(_settings_env(rendered, service)["HERALD_GRACE_PERIOD_S"])
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    pause_s = float(pre_stop[1]) if pre_stop and pre_stop[0] == "sleep" else 0.0
    assert pod["terminationGracePeriodSeconds"] > pause_s + grace_s


@pytest.mark.parametrize("service", SERVICES)
def test_probes_use_the_existing_endpoints(rendered: list[Manifest], service: str) -> None:
    container = _container(rendered, service)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    ready = "/readyz" if service == "api" else "/healthz"
    for probe, path in (("readinessProbe", ready), ("livenessProbe", "/healthz")):
        http = container[probe]["httpGet"]
        assert http["path"] == path, f"{service} {probe}"
        assert ports[http["port"]] == SERVICES[service], f"{service} {probe}"


@pytest.mark.parametrize("service", SERVICES)
def test_resources_and_scrape_annotations(rendered: list[Manifest], service: str) -> None:
    resources = _container(rendered, service)["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]
    annotations = _by_kind(rendered, "Deployment")[service]["spec"]["template"]["metadata"][
        "annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == SERVICES[service]
    assert annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("service", SERVICES)
def test_pods_run_locked_down(rendered: list[Manifest], service: str) -> None:
    pod, container = _pod_spec(rendered, service), _container(rendered, service)
    assert pod["enableServiceLinks"] is False  # HERALD_API_PORT=tcp://... would break settings
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_only_the_autoscaler_sets_the_number_of_senders(rendered: list[Manifest]) -> None:
    deployments = _by_kind(rendered, "Deployment")
    assert "replicas" not in deployments["sender"]["spec"]
    for service in ("api", "dispatcher", "scheduler"):
        assert deployments[service]["spec"]["replicas"] >= 2
    scalers = [*_by_kind(rendered, "ScaledObject").values(),
               *_by_kind(rendered, "HorizontalPodAutoscaler").values()]
    assert [s["spec"]["scaleTargetRef"]["name"] for s in scalers] == ["sender"]


def test_no_store_runs_in_the_set(rendered: list[Manifest]) -> None:
    """MongoDB, RabbitMQ and Redis come from their operators or charts."""
    assert not _by_kind(rendered, "StatefulSet")
    images = {_container(rendered, s)["image"] for s in SERVICES}
    assert images == {f"herald:{VERSION}"}
    env = _settings_env(rendered, "sender")
    for name in ("HERALD_MONGODB_URL", "HERALD_RABBITMQ_URL", "HERALD_REDIS_URL"):
        assert name not in _by_kind(rendered, "ConfigMap")["herald-config"]["data"], (
            f"{name} carries credentials: it belongs in the herald-stores Secret")
        assert ".svc.cluster.local" in env[name]
