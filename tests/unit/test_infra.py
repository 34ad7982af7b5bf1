"""Deployment files agree with the code: every queue has a pool that serves it and scales on it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from headwater import queues as names

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _queues_in(args: list[str]) -> set[str]:
    return set(args[args.index("--queues") + 1].split(",")) if "--queues" in args else set()


# Names of settings whose values are secrets: they come from a Secret, never inline in a manifest.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|DSN|DATABASE_URL)", re.IGNORECASE)
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")


def _rendered(kustomization: str = "base") -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render infra/k8s (it renders offline): apt-get install kubectl"
    rendered = subprocess.run([kubectl, "kustomize", str(INFRA / "k8s" / kustomization)], capture_output=True, text=True,
                              check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def _containers(workload: dict) -> list[dict]:
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


@pytest.mark.timeout(60)
def test_kustomize_base_has_a_scaling_pool_for_every_queue():
    documents = _rendered()
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


@pytest.mark.timeout(60)
def test_the_embedding_endpoint_overlay_runs_the_dense_pool_on_threads_without_a_model():
    documents = _rendered("embedding-endpoint")
    (config,) = [d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "headwater"]
    assert config["data"]["HEADWATER_DENSE_ENDPOINT_URL"].endswith("/v1") and config["data"]["HEADWATER_DENSE_ENDPOINT_MODEL"]
    (dense,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "worker-embed-dense"]
    args = dense["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _queues_in(args) == {names.EMBED_DENSE_QUEUE} and args[args.index("--pool") + 1] == "threads"
    assert int(args[args.index("-c") + 1]) >= int(config["data"]["HEADWATER_DENSE_ENDPOINT_CONCURRENCY"]) // 2
    from headwater.settings import Settings

    Settings(**{k.removeprefix("HEADWATER_").lower(): v for k, v in config["data"].items()})  # every value is valid
    for d in documents:  # the base's other pools and checks are untouched
        if d["kind"] == "ConfigMap":
            assert not [k for k in d["data"] if SECRET_NAME.search(k)]


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


@pytest.mark.timeout(60)
def test_every_container_has_probes_and_limits_and_every_workload_a_disruption_budget():
    documents = _rendered()
    workloads = [d for d in documents if d["kind"] in WORKLOADS]
    assert {d["metadata"]["name"] for d in workloads} >= {"serve", "beat", "redis", "chroma"}
    for workload in workloads:
        for container in _containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert "livenessProbe" in container and "readinessProbe" in container, f"{where} has no probes"
            limits = container.get("resources", {}).get("limits", {})
            assert "cpu" in limits and "memory" in limits, f"{where} has no cpu and memory limits"
    budgets = [d for d in documents if d["kind"] == "PodDisruptionBudget"]
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(all(labels.get(k) == v for k, v in b["spec"]["selector"]["matchLabels"].items()) for b in budgets), \
            f"{workload['metadata']['name']} has no PodDisruptionBudget"
    (serve,) = [d for d in workloads if d["metadata"]["name"] == "serve"]
    assert any(d["kind"] == "Service" and d["spec"]["selector"] == serve["spec"]["selector"]["matchLabels"]
               for d in documents)


@pytest.mark.timeout(60)
def test_no_secret_value_is_inline_in_the_manifests():
    documents = _rendered()
    assert not [d for d in documents if d["kind"] == "Secret"], "a Secret is rendered: its values would be committed"
    for d in documents:
        if d["kind"] == "ConfigMap":
            leaked = [k for k, v in d["data"].items() if SECRET_NAME.search(k) or re.search(r"://[^/@\s]*:[^@/\s]+@", v)]
            assert not leaked, f"ConfigMap {d['metadata']['name']} holds secrets: {leaked}"
        if d["kind"] in WORKLOADS:
            for container in _containers(d):
                for env in container.get("env", []):
                    if SECRET_NAME.search(env["name"]):
                        assert "value" not in env and "secretKeyRef" in env.get("valueFrom", {}), \
                            f"{d['metadata']['name']}: {env['name']} must come from a Secret"
        if d["kind"] == "ScaledObject":
            for trigger in d["spec"]["triggers"]:
                assert not any(SECRET_NAME.search(k) for k in trigger["metadata"]), "use a TriggerAuthentication"


RESTARTING = ("always", "unless-stopped", "on-failure")
ONE_OFF_JOBS = {"sync"}  # the only services allowed not to restart, and only under the manual profile


def test_compose_services_all_have_a_healthcheck_a_restart_policy_and_workers_a_grace_period():
    compose = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"serve", "beat", "flower", "redis", "chroma"} <= set(services)
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
        if name in ONE_OFF_JOBS and "manual" in service.get("profiles", []):
            # A one-off job run by hand (`docker compose run --rm sync`): restarting it would repeat the sync forever.
            assert service.get("restart") == "no", f"{name} is a one-off job: restart must be \"no\""
        else:
            assert service.get("restart") in RESTARTING, \
                f"{name} is long-running: restart must be one of {RESTARTING}, not {service.get('restart')!r}"
        for key in ("environment",):
            for var, value in (service.get(key) or {}).items():
                if SECRET_NAME.search(var):
                    assert str(value).startswith("${"), f"{name}: {var} must come from the environment or .env"
    redis_command = services["redis"]["command"]
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    assert any(v.startswith("redis-data:") for v in services["redis"]["volumes"])
    assert any(v.startswith("chroma-data:") for v in services["chroma"]["volumes"])
    for name, service in services.items():
        if name.startswith("worker-"):
            assert service["stop_grace_period"] == "2m", f"{name} would be killed after docker's default 10 s"


PROJECT = INFRA.parent
PACKAGES = ("headwater", "connectors", "workers", "schedules")  # pyproject's packages


def _settings_classes() -> list[type]:
    """Every pydantic-settings class in the project's packages, found in the source (so a new one is covered)."""
    import ast
    import importlib

    found = []
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and any(
                        getattr(base, "id", getattr(base, "attr", None)) == "BaseSettings" for base in node.bases):
                    module = ".".join(path.relative_to(PROJECT).with_suffix("").parts).removesuffix(".__init__")
                    found.append(getattr(importlib.import_module(module), node.name))
    return found


def test_env_example_documents_every_setting():
    from pydantic import SecretStr

    from headwater.consolidation.config import ConsolidationSettings
    from headwater.settings import Settings

    classes = _settings_classes()
    assert {Settings, ConsolidationSettings} <= set(classes), f"the source scan found only {classes}"
    text = (INFRA / ".env.example").read_text()
    lines = text.splitlines()
    documented = {m.group(1): (i, m.group(2)) for i, line in enumerate(lines)
                  if (m := re.match(r"^#?\s*(HEADWATER_[A-Z0-9_]+)=(.*)$", line))}
    for cls in classes:
        prefix = cls.model_config["env_prefix"]
        assert prefix.startswith("HEADWATER_"), f"{cls.__name__} reads {prefix}*: keep settings under HEADWATER_"
        wanted = {f"{prefix}{name.upper()}": field for name, field in cls.model_fields.items()}
        missing = sorted(set(wanted) - set(documented))
        assert not missing, f"{cls.__name__} settings missing from infra/.env.example: {missing}"
        for var, field in wanted.items():
            index, value = documented[var]
            if field.annotation is not None and SecretStr in (getattr(field.annotation, "__args__", None) or (field.annotation,)):
                note = lines[index + 1] if index + 1 < len(lines) else ""
                assert note.startswith("# (secret"), f"{var} is a secret: the line after it must say (secret)"
                if field.default is None:
                    assert value == "", f"{var} is a secret: .env.example must not give it a value"


def _dockerfile() -> list[tuple[str, str]]:
    """infra/Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    instructions, pending = [], ""
    for line in (INFRA / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            keyword, _, arguments = pending.strip().partition(" ")
            instructions.append((keyword.upper(), " ".join(arguments.split())))
            pending = ""
    return instructions


def _no_deps_installs(text: str) -> set[str]:
    """What `pip install --no-deps` installs in `text`: requirement files (-r FILE) and local packages (./DIR)."""
    found = set()
    for command in re.findall(r"install[^\n&|;]*--no-deps[^\n&|;]*", text):
        words = command.split()
        found |= {words[i + 1] for i, w in enumerate(words[:-1]) if w == "-r"}
        found |= {w.removeprefix("./") for w in words if w.startswith("./")}
    return found


def _quickstart_part(install_sh: str) -> str:
    """install.sh without its `--test`-only branches (what the quickstart and the image run)."""
    kept, skipping = [], False
    for line in install_sh.splitlines():
        stripped = line.strip()
        if re.match(r'if \[ "\$test_install" = 1 \]', stripped):
            skipping = True
        elif skipping and stripped in ("else", "fi"):
            skipping = False
        elif not skipping:
            kept.append(line)
    return "\n".join(kept)


def test_the_dockerfile_installs_dependencies_before_it_copies_the_code():
    """A code change must not rebuild the dependency layers: they come from the dependency files alone."""
    instructions = _dockerfile()
    copies_code = [i for i, (k, a) in enumerate(instructions)
                   if k == "COPY" and "." in [w for w in a.split() if not w.startswith("--")][:-1]]
    assert copies_code, "infra/Dockerfile never copies the source tree (COPY . /app)"
    dependencies = [i for i, (k, a) in enumerate(instructions)
                    if k == "RUN" and "--no-deps -r requirements-nodeps.txt" in a and "pip install -r" in a]
    assert dependencies, "infra/Dockerfile has no RUN that installs the dependencies from their files"
    assert dependencies[0] < copies_code[0], "the dependencies are installed after `COPY .`: every code change reinstalls them"
    for keyword, arguments in instructions[:dependencies[0]]:
        if keyword in ("COPY", "ADD"):
            sources = [w for w in arguments.split() if not w.startswith("--")][:-1]
            assert not set(sources) & {".", *PACKAGES}, f"`{keyword} {arguments}` puts code in the dependency layers"
    # Headwater itself is installed by the same script as a checkout's quickstart, after the code is in.
    assert any(k == "RUN" and "scripts/install.sh" in a for k, a in instructions[copies_code[0]:])


def test_the_dockerfile_installs_without_dependencies_what_install_sh_does():
    """The image's dependency layer and scripts/install.sh read the same --no-deps lists (one place to change them)."""
    instructions = _dockerfile()
    (at,) = [i for i, (k, a) in enumerate(instructions) if k == "RUN" and "--no-deps" in a]
    install_sh = (PROJECT / "scripts" / "install.sh").read_text()
    expected = _no_deps_installs(_quickstart_part(install_sh))
    assert "requirements-nodeps.txt" in expected, f"the parse of install.sh found only {expected}"
    assert _no_deps_installs(instructions[at][1]) == expected
    copied = [Path(w) for k, a in instructions[:at] if k == "COPY" for w in a.split()[:-1] if not w.startswith("--")]
    for path in expected:  # each is copied in before that layer, on its own or in its folder
        assert any(c == Path(path) or c in Path(path).parents for c in copied), f"{path} is not copied before it is installed"
