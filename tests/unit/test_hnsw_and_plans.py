"""HNSW settings per collection, and how a filtered dense search picks its plan."""

from __future__ import annotations

import pytest

from headwater.retrieval.filtered_dense import MAX_OVERFETCH, overfetch_size
from headwater.settings import HnswConfig, Settings


def test_a_collection_table_overrides_the_environment_defaults(tmp_path):
    config = tmp_path / "headwater.toml"
    config.write_text('[collections.handbook.hnsw]\nm = 32\nsearch_ef = 64\n')
    settings = Settings(config_file=config, hnsw_construction_ef=150, hnsw_search_ef=120)
    assert settings.hnsw("handbook") == HnswConfig(m=32, construction_ef=150, search_ef=64)
    assert settings.hnsw("other") == HnswConfig(construction_ef=150, search_ef=120)
    assert Settings(config_file=tmp_path / "none.toml").hnsw() == HnswConfig(space="cosine", m=16, construction_ef=100, search_ef=200)


def test_a_mistyped_hnsw_key_is_refused_with_its_table(tmp_path):
    config = tmp_path / "headwater.toml"
    config.write_text('[collections.handbook.hnsw]\nef = 64\n')
    with pytest.raises(ValueError, match=r"collections\.handbook\.hnsw"):
        Settings(config_file=config).hnsw("handbook")


def test_overfetch_only_while_it_is_cheaper_than_a_restricted_query():
    assert overfetch_size(50, 20_000, 100_000) == 500  # a fifth of the collection: 50 / 0.2 * 2
    assert overfetch_size(50, 90_000, 100_000) == 112
    assert overfetch_size(50, 100, 100) == 100  # never more than there is
    assert overfetch_size(50, 2_000, 100_000) is None  # 5,000 results would cost more
    assert overfetch_size(50, 0, 100_000) is None
    assert overfetch_size(1, 1, 10**9) is None
    assert overfetch_size(50, 10_000, 100_000) == MAX_OVERFETCH
    # As wide as Chroma's filtered walk with this search ef: 200 allowed candidates at a 20 % share.
    assert overfetch_size(50, 20_000, 100_000, search_ef=200) == 1_000
    assert overfetch_size(50, 10_000, 100_000, search_ef=200) is None
