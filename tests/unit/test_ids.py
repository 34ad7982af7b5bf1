from headwater.ids import chunk_ids, content_hash


def test_ids_are_deterministic_and_depend_on_place_and_content():
    first = chunk_ids("src", "a.md", ["alpha", "beta"])
    assert first == chunk_ids("src", "a.md", ["alpha", "beta"])
    assert first != chunk_ids("src", "b.md", ["alpha", "beta"])
    assert first != chunk_ids("other", "a.md", ["alpha", "beta"])
    assert chunk_ids("src", "a.md", ["alpha"])[0] == first[0]  # independent of neighbours


def test_repeated_text_in_one_document_gets_distinct_ids():
    ids = chunk_ids("src", "a.md", ["same", "same", "other"])
    assert len(set(ids)) == 3


def test_content_hash_ignores_place():
    assert content_hash("text") == content_hash("text") != content_hash("text ")
