import subprocess
import sys

import pytest
from pydantic import ValidationError

from headwater.errors import ChromaPathBusy
from headwater.store.path_lock import ChromaPathLock
from headwater.pipeline.report import SyncReport
from headwater.settings import HARD_BATCH_CAP, Settings


def test_defaults(monkeypatch):
    settings = Settings()
    assert str(settings.chroma_path) == ".headwater/chroma" and settings.collection == "headwater"
    assert settings.upsert_batch_size <= HARD_BATCH_CAP


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("HEADWATER_COLLECTION", "docs")
    monkeypatch.setenv("HEADWATER_CHUNK_TOKENS", "200")
    settings = Settings()
    assert settings.collection == "docs" and settings.chunk_tokens == 200


def test_overlap_must_leave_room_in_the_window():
    with pytest.raises(ValidationError, match="chunk_overlap_tokens"):
        Settings(chunk_tokens=200, chunk_overlap_tokens=200)


def test_sources_from_toml(tmp_path):
    config = tmp_path / "headwater.toml"
    config.write_text('[[sources]]\nid = "handbook"\nkind = "folder"\noptions = { path = "docs" }\n')
    settings = Settings(config_file=config)
    from headwater.sources.model import declared_source, declared_sources

    assert declared_source(settings, "handbook").options == {"path": "docs"}
    config.write_text(config.read_text() * 2)
    with pytest.raises(ValueError, match="declared twice"):
        declared_sources(Settings(config_file=config))


def test_exit_code_reflects_failures():
    report = SyncReport(source_id="s")
    assert report.exit_code == 0
    report.skip("empty.md", "empty file")
    assert report.exit_code == 0
    report.fail("bad.pdf", "corrupt")
    assert report.exit_code == 2


def test_second_writer_process_gets_a_clear_error(tmp_path):
    with ChromaPathLock(tmp_path):
        probe = ("import sys; from headwater.store.path_lock import ChromaPathLock\n"
                 f"try:\n    ChromaPathLock({str(tmp_path)!r}).acquire()\n"
                 "except Exception as exc:\n    print(type(exc).__name__, exc); sys.exit(3)\n")
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        assert result.returncode == 3
        assert "ChromaPathBusy" in result.stdout and "another Headwater process" in result.stdout
    ChromaPathLock(tmp_path).acquire()  # released: the next writer gets it


def test_lock_in_same_process_is_exclusive_too(tmp_path):
    with ChromaPathLock(tmp_path):
        with pytest.raises(ChromaPathBusy):
            ChromaPathLock(tmp_path).acquire()
