"""A worker's broker connection survives Redis going away while it holds unacknowledged messages."""

from __future__ import annotations

import pytest
import redis
from kombu.common import ignore_errors

from workers.broker_transport import Transport, broker_transport
from headwater.settings import Settings
from tests.services import redis_server
from workers.celery_app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_redis_brokers_use_the_guarded_transport_and_others_keep_kombus():
    assert broker_transport("redis://127.0.0.1:6379/0") == "workers.broker_transport:Transport"
    assert broker_transport("rediss://cache.example:6380/0") is None  # TLS: kombu's choice by scheme
    assert broker_transport("sentinel://host:26379") is None


def test_a_channel_closing_after_its_connection_raises_a_connection_error(tmp_path):
    # The window: Celery closed the connection (its transport lost its client) and then closes the
    # channel, which restores its unacknowledged messages and so asks for connection parameters.
    with redis_server(tmp_path) as url:
        app = create_app(Settings(redis_url=url))
        connection = app.connection_for_write()
        channel = connection.default_channel
        assert isinstance(connection.transport, Transport)
        channel.qos._delivered["tag"] = ("message", "exchange", "routing key")  # a message it holds
        channel.connection.client = None
        with pytest.raises(redis.exceptions.ConnectionError):
            channel._connparams()
        # Celery closes through ignore_errors, which swallows connection errors (AttributeError
        # escaped it, and the worker exited as "unrecoverable").
        ignore_errors(connection, channel.close)
