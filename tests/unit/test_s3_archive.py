"""Objects in an archive storage class: readable only once restored, and the reason says what to do."""

from __future__ import annotations

import pytest

from connectors.s3 import archived_reason


@pytest.mark.parametrize("storage_class", [None, "STANDARD", "STANDARD_IA", "GLACIER_IR", "INTELLIGENT_TIERING"])
def test_classes_a_get_can_read_need_no_restore(storage_class):
    assert archived_reason(storage_class, None) is None


def test_an_archived_object_names_its_class_and_what_to_do():
    assert archived_reason("GLACIER", None) == ("stored in GLACIER and not restored; restore it (S3 RestoreObject) "
                                                "or exclude it")
    assert archived_reason("DEEP_ARCHIVE", None).startswith("stored in DEEP_ARCHIVE and not restored")


def test_a_restore_in_progress_is_not_yet_readable_and_a_finished_one_is():
    assert "being restored" in archived_reason("GLACIER", 'ongoing-request="true"')
    assert archived_reason("GLACIER", 'ongoing-request="false", expiry-date="Fri, 21 Dec 2026 00:00:00 GMT"') is None
