"""The OpenAPI schema, fuzzed by schemathesis against a running embedded serve: no input gets a 5xx."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.test_http_embedded import folder_source, write_docs

pytestmark = pytest.mark.integration
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def fuzz_serve(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve-fuzz")
    server = ServeProcess(work, {"HEADWATER_CHROMA_PATH": str(work / "chroma"),
                                 "HEADWATER_CONFIG_FILE": str(work / "none.toml"),
                                 "HEADWATER_FOLDER_ROOTS": json.dumps([str(work)])})
    with server:
        folder = write_docs(work / "fuzz", 2)
        server.api.post("/api/v1/sources", json=folder_source("fuzz", folder)).raise_for_status()
        server.wait_for_run(server.api.post("/api/v1/sources/fuzz/runs").json()["run_id"])
        yield server


@pytest.fixture(scope="module")
def api_schema(fuzz_serve):
    return schemathesis.openapi.from_url(fuzz_serve.url + "/openapi.json", headers=AUTH, timeout=30)


@pytest.mark.timeout(1200)
def test_no_request_gets_a_server_error(api_schema, fuzz_serve):
    # Driven per operation with Hypothesis directly (schemathesis' pytest plugin does not load under pytest 9).
    failures, calls = {}, []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        @given(case=operation.as_strategy())
        def fuzz(case) -> None:
            response = case.call(headers=AUTH, timeout=60)
            calls.append((operation.label, response.status_code))
            case.validate_response(response, checks=[not_a_server_error])

        try:
            fuzz()
        except Exception as exc:  # noqa: BLE001  (collect every operation's failure, then report them all)
            failures[operation.label] = str(exc)[:2000]
    assert not failures, failures
    assert len({label for label, _ in calls}) >= 15 and len(calls) > 200, calls
    assert any(200 <= status < 300 for _, status in calls) and any(status == 422 for _, status in calls)
    assert "Traceback" not in fuzz_serve.log(), fuzz_serve.log()[-5000:]
