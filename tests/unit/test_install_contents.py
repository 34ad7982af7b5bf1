"""What the quickstart install holds: pyproject's dependencies plus requirements-nodeps.txt (--no-deps).

The invariants issue 40 set: nothing in the quickstart pulls CUDA; every dependency a --no-deps
package declares is either installed through pyproject or left out with a reason
([tool.headwater.left-out]); scripts/install.sh and infra/Dockerfile install the same --no-deps list;
the dense model's tokenizer files shipped in the package are the bytes its identity was made from.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Distributions that are, or pull, the CUDA stack from the package registry on Linux (bench/install.py checks installs).
CUDA = {"torch", "torchvision", "torchaudio", "triton", "tensorflow", "jax", "jaxlib", "onnxruntime-gpu"}


def _requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


NODEPS = _requirements(ROOT / "requirements-nodeps.txt")
DEPENDENCIES = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
LEFT_OUT = PYPROJECT["tool"]["headwater"]["left-out"]


def _names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements}


def _pulls_cuda(name: str) -> bool:
    return name in CUDA or name.startswith(("nvidia-", "cupy"))


def test_the_quickstart_lists_nothing_that_pulls_cuda():
    listed = _names(DEPENDENCIES) | _names(NODEPS)
    assert not [name for name in listed if _pulls_cuda(name)]


def test_nodeps_packages_are_pinned():
    # Installed without a resolver's checks: an exact version is what pyproject's list was made against.
    for requirement in NODEPS:
        assert len(requirement.specifier) == 1 and next(iter(requirement.specifier)).operator == "==", requirement


def test_every_left_out_package_has_a_reason_and_is_really_left_out():
    for name, reason in LEFT_OUT.items():
        assert isinstance(reason, str) and len(reason.split()) >= 5, f"{name}: say why it is left out"
        requirement = Requirement(name)
        assert _key(requirement.name, requirement.extras) == name, \
            f"{name}: write the canonical name ({_key(requirement.name, requirement.extras)})"
    both = {name for name in LEFT_OUT if "[" not in name} & (_names(DEPENDENCIES) | _names(NODEPS))
    assert not both, f"both installed and left out: {sorted(both)}"


def _key(name: str, extras: set[str]) -> str:
    """A left-out entry's name: the canonical package name, with the extras left out when only they are."""
    return canonicalize_name(name) + (f"[{','.join(sorted(extras))}]" if extras else "")


def _declared(requirement: Requirement) -> list[Requirement]:
    """What a --no-deps package declares, with the extras requirements-nodeps.txt names (from its installed metadata)."""
    try:
        declared = metadata.requires(requirement.name) or []
    except metadata.PackageNotFoundError:
        pytest.skip(f"{requirement.name} is not installed here: its declared dependencies cannot be read")
    return [line for line in map(Requirement, declared) if _active(line, requirement.extras)]


def _active(line: Requirement, extras: set[str]) -> bool:
    """Whether a declared requirement applies here, with these extras of its package requested."""
    return line.marker is None or any(line.marker.evaluate({**default_environment(), "extra": extra})
                                      for extra in ["", *sorted(extras)])


def test_every_declared_dependency_of_a_nodeps_package_is_installed_or_left_out_with_a_reason():
    # What pyproject and the list install, each with the extras requested for it.
    installed = {canonicalize_name(r.name): set(r.extras) for r in [*DEPENDENCIES, *NODEPS]}
    unaccounted, used = {}, set()
    for package in NODEPS:
        for requirement in _declared(package):
            name = canonicalize_name(requirement.name)
            if name in installed:  # the package is installed: are the extras it is declared with?
                missing = set(requirement.extras) - installed[name]
                if not missing:
                    continue
                name = _key(name, missing)
            if name in LEFT_OUT:
                used.add(name)
            else:
                unaccounted.setdefault(name, []).append(package.name)
    assert not unaccounted, ("declared by --no-deps packages, neither in pyproject's dependencies nor in "
                             f"[tool.headwater.left-out]: {unaccounted}")
    assert not set(LEFT_OUT) - used, f"left-out entries no --no-deps package declares: {sorted(set(LEFT_OUT) - used)}"


def test_nothing_the_quickstart_installs_pulls_cuda():
    """The quickstart's whole dependency tree, walked through installed metadata (the test install has it all)."""
    seen, todo, parents = set(), list(DEPENDENCIES), {}
    nodeps = _names(NODEPS)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        if name in nodeps:
            continue  # installed without its dependencies
        try:
            declared = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (a marker excluded it, or a unit-test-only environment)
        for line in map(Requirement, declared):
            if _active(line, requirement.extras):
                parents.setdefault(canonicalize_name(line.name), name)
                todo.append(line)
    pulling = {name: parents.get(name) for name in seen if _pulls_cuda(name)}
    assert not pulling, f"quickstart packages that pull CUDA (package: who requires it): {pulling}"


def test_install_script_and_dockerfile_install_the_same_nodeps_list():
    script = (ROOT / "scripts" / "install.sh").read_text()
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    for name, text in (("scripts/install.sh", script), ("infra/Dockerfile", dockerfile)):
        assert re.search(r"--no-deps\s+-r\s+requirements-nodeps\.txt", text), f"{name} must install requirements-nodeps.txt"
        # Any other --no-deps install names a file or a local package, never a registry package on its own.
        commands = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        others = re.findall(r"--no-deps\s+(?!-r\s)(\S+)", commands)
        assert all(target.startswith("./packaging/") for target in others), f"{name}: --no-deps {others}"
    assert re.search(r"COPY [^\n]*requirements-nodeps\.txt", dockerfile), "the image must copy the list it installs"
    docs = (ROOT / "docs" / "install.md").read_text()
    assert "requirements-nodeps.txt" in docs and "pip install -e ." in docs


TOKENIZER_SHA256 = {  # the bytes the dense model's identity was made from (model_files/all-MiniLM-L6-v2/README.md)
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}


def test_the_shipped_tokenizer_files_are_the_models_own_and_small():
    from headwater.pipeline.embed_dense import TOKENIZER_DIR

    readme = (TOKENIZER_DIR / "README.md").read_text()
    assert "Apache-2.0" in readme
    total = 0
    for name, digest in TOKENIZER_SHA256.items():
        data = (TOKENIZER_DIR / name).read_bytes()
        total += len(data)
        assert hashlib.sha256(data).hexdigest() == digest, f"{name} changed: the dense model's identity would change"
        assert digest in readme, f"{name}: README.md's table must show its digest"
    assert total < 1_000_000
