"""Property-based requests from the service's own OpenAPI schema (schemathesis): whatever is sent
to any operation, the service never answers with a 5xx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error

from opsagent.service.app import create_app
from tests.service_support import AUTH, serving
from tests.service_support import settings as service_settings

EXAMPLES = 20


def test_no_request_makes_the_service_fail(tmp_path: Path) -> None:
    app = create_app(service_settings(tmp_path, fixtures_dir=None), runner="thread", poll_s=0.2)
    with serving(app) as base:
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json", headers=AUTH)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
            "POST /webhook/alertmanager",
            "GET /incidents",
            "GET /incidents/{incident_id}",
        }
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def no_server_error(case: Any) -> None:
                case.call_and_validate(base_url=base, headers=AUTH, checks=[not_a_server_error])

            no_server_error()
