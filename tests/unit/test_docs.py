"""The documentation site: the configuration reference is what the settings classes say, and the site
builds offline in strict mode (no broken links or anchors, no page left out of the nav)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_configuration_reference_is_current():
    generated = _generator().render()
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == generated, "docs/configuration.md is out of date: run `python scripts/gen_config_docs.py`"


def test_the_reference_lists_every_setting_with_its_variable():
    from headwater.consolidation.config import ConsolidationSettings
    from headwater.settings import Settings

    page = _generator().render()
    for cls in (Settings, ConsolidationSettings):
        prefix = cls.model_config["env_prefix"]
        for name in cls.model_fields:
            assert f"| `{prefix}{name.upper()}` |" in page, f"{prefix}{name.upper()} is missing from the reference"


def test_secrets_are_shown_as_secret_and_their_defaults_never():
    from headwater.settings import Settings

    page = _generator().render()
    secrets = [name for name, field in Settings.model_fields.items()
               if SecretStr in (field.annotation, *getattr(field.annotation, "__args__", ()))]
    assert "redis_url" in secrets and "admin_token" in secrets
    for name in secrets:
        row = next(line for line in page.splitlines() if line.startswith(f"| `HEADWATER_{name.upper()}` |"))
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert cells[1] == "secret" and cells[2] in ("unset", "built in (not shown)"), row
    assert Settings().redis_url.get_secret_value() not in page


def test_a_setting_without_a_description_stops_the_generator():
    class Undocumented(BaseModel):
        documented: int = 1
        """Has one."""
        bare: int = 2

        model_config = {"use_attribute_docstrings": True}

    with pytest.raises(ValueError, match="bare has no description"):
        _generator()._table(Undocumented, "X_")


def test_the_site_builds_offline_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                            "--site-dir", str(site)], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    output = built.stdout + built.stderr
    assert built.returncode == 0 and "WARNING" not in output, output[-4000:]
    architecture = (site / "architecture" / "index.html").read_text(encoding="utf-8")
    # The state machine and crash points are included from workers/README.md, not copied.
    assert "flush.after_write" in architecture and "headwater:leases" in architecture
    assert (site / "dashboard.png").is_file()


def test_every_repository_path_the_docs_name_exists():
    """`workers/chunk.py` in a page must still be there: a moved module makes its mention fail here, not mislead."""
    import re

    mention = re.compile(r"`((?:headwater|workers|connectors|schedules|bench|infra|scripts|tests|examples|packaging|docs)"
                         r"/[\w./-]*)`")
    pages = [ROOT / "README.md", ROOT / "workers" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = [f"{page.relative_to(ROOT)}: {path}" for page in pages
               for path in mention.findall(page.read_text(encoding="utf-8")) if not (ROOT / path).exists()]
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


def test_the_layout_names_every_package_and_only_real_ones():
    """docs/architecture.md's Layout: each top-level folder and each group of the core, no more, no less."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = page.split("## Layout", 1)[1].split("```", 2)[1]
    named = re.findall(r"^( {0,2})([\w./-]+/) ", block, flags=re.MULTILINE)
    top = {name.split("/")[0] for indent, name in named if not indent}
    core = {name.rstrip("/") for indent, name in named if indent}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    folders = {path.split("/")[0] for path in tracked if "/" in path and not path.startswith(".")}
    groups = {path.split("/")[1] for path in tracked if path.startswith("headwater/") and path.count("/") == 2
              and path.endswith("/__init__.py")}
    assert top == folders, f"layout lists {sorted(top - folders)} that are not folders, lacks {sorted(folders - top)}"
    assert core == groups, f"layout lists {sorted(core - groups)} that are not core groups, lacks {sorted(groups - core)}"


def test_every_toml_example_is_a_valid_headwater_toml(tmp_path):
    """A reader copies these into headwater.toml: each must parse, and its sources and collections must load."""
    import re
    import tomllib

    from headwater.settings import Settings

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [(page, body) for page in pages
              for body in re.findall(r"^```toml\n(.*?)^```$", page.read_text(encoding="utf-8"), re.S | re.M)]
    assert len(blocks) >= 4, f"found only {len(blocks)} TOML examples: the block pattern is wrong"
    for page, body in blocks:
        config = tmp_path / "headwater.toml"
        config.write_text(body, encoding="utf-8")
        try:
            data = tomllib.loads(body)
            settings = Settings(config_file=config)
            from headwater.sources.model import declared_sources

            assert declared_sources(settings) or data.get("collections"), "declares no source and no collection"
            for name in data.get("collections", {}):
                settings.hnsw(name)
        except (ValueError, AssertionError) as exc:
            raise AssertionError(f"{page.relative_to(ROOT)}: a TOML example is not a valid headwater.toml: {exc}\n{body}")


def test_the_readme_stays_short():
    """The README is for a first visit; everything else belongs on a page of docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move detail into docs/ and link to it"
