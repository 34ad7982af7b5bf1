import os

import pytest

from connectors.base import build_connector, register_connector
from connectors.folder import FolderConnector
from headwater.models import Op


def _tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_lists_files_with_relative_uris_and_stat_versions(tmp_path):
    _tree(tmp_path, {"a.md": "a", "sub/b.txt": "b", ".env": "SECRET=1", ".git/config": "x",
                     "node_modules/x/y.js": "z", "notes.md~": "backup"})
    changes = list(FolderConnector("s", tmp_path).list_documents())
    assert [c.uri for c in changes] == ["a.md", "sub/b.txt"]
    assert all(c.op is Op.UPSERT and c.source_id == "s" and ":" in c.version for c in changes)
    assert [c.size for c in changes] == [1, 1]  # a fleet run admits its largest documents first


def test_include_and_exclude_globs(tmp_path):
    _tree(tmp_path, {"a.md": "a", "b.txt": "b", "drafts/c.md": "c"})
    connector = FolderConnector("s", tmp_path, include=["*.md"], exclude=["drafts/**"])
    assert [c.uri for c in connector.list_documents()] == ["a.md"]


def test_never_follows_links_out_of_the_root(tmp_path):
    outside = tmp_path / "outside"
    root = tmp_path / "root"
    _tree(outside, {"secret.md": "outside"})
    _tree(root, {"inside.md": "inside"})
    os.symlink(outside / "secret.md", root / "link.md")
    os.symlink(outside, root / "linked-dir")
    os.symlink(root / "inside.md", root / "alias.md")
    connector = FolderConnector("s", root)
    assert sorted(c.uri for c in connector.list_documents()) == ["alias.md", "inside.md"]
    with pytest.raises(PermissionError):
        connector.read("link.md", 100)


def test_version_changes_when_the_file_changes(tmp_path):
    _tree(tmp_path, {"a.md": "one"})
    connector = FolderConnector("s", tmp_path)
    before = next(connector.list_documents()).version
    (tmp_path / "a.md").write_text("two two")
    assert next(connector.list_documents()).version != before


def test_registry_builds_folders_and_refuses_duplicates(tmp_path):
    assert isinstance(build_connector("folder", "s", path=tmp_path), FolderConnector)
    with pytest.raises(ValueError, match="already registered"):
        register_connector("folder", FolderConnector)
    with pytest.raises(ValueError, match="unknown source kind"):
        build_connector("ftp", "s")


def test_the_listing_never_enters_a_directory_no_include_can_reach(tmp_path):
    """So an unreadable directory that the globs cannot reach (a lost+found, say) cannot stop the pass."""
    import sys

    scanned: list[str] = []
    sys.addaudithook(lambda event, args: scanned.append(str(args[0])) if event == "os.scandir" else None)
    (tmp_path / "docs" / "api").mkdir(parents=True)
    (tmp_path / "docs" / "api" / "index.md").write_text("# API")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.md").write_text("# private")
    connector = FolderConnector("s", tmp_path, include=["docs/**/*.md"])
    assert [c.uri for c in connector.list_documents()] == ["docs/api/index.md"]
    assert str(tmp_path / "docs" / "api") in scanned and str(tmp_path / "secrets") not in scanned
    assert FolderConnector("s", tmp_path, include=["*.md"]).wants_dir("secrets")  # * spans directories
    assert FolderConnector("s", tmp_path, include=["**/key.md"]).wants_dir("secrets")
    assert FolderConnector("s", tmp_path, include=["secrets/key.md"]).wants_dir("secrets")
