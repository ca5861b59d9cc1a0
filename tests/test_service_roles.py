"""The service split in two, on both backends: a web process (``serve --no-workers``) accepts and
serves pages but runs no investigation; a worker process (``opsagent worker``) runs the queued jobs
and answers only health probes and /metrics."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from opsagent.service.app import create_app
from opsagent.store import Store, StoreLocation
from tests.service_support import AUTH, notification, settings, wait_for


def test_a_web_process_queues_jobs_that_a_worker_process_runs(tmp_path: Path, store_location: StoreLocation) -> None:
    web = create_app(settings(tmp_path), runner="thread", poll_s=0.2, role="web")
    # a worker has no webhook, so no webhook token: the readers' token opens its /metrics
    worker_settings = settings(tmp_path, webhook_token=None, read_token="reader-token")
    worker = create_app(worker_settings, runner="thread", poll_s=0.2, role="worker")
    reader = {"Authorization": "Bearer reader-token"}
    with TestClient(web, headers=AUTH) as site:
        accepted = site.post("/webhook/alertmanager", json=notification())
        assert accepted.status_code == 202
        incident_id = accepted.json()["incident_id"]
        assert site.get("/readyz").json() == {"status": "ready", "queued": 1, "running": 0}
        with Store(store_location) as store:  # nothing here takes it
            assert store.job_counts()["queued"] == 1

        with TestClient(worker) as investigations:
            assert investigations.get("/healthz").status_code == 200
            assert investigations.get("/readyz").status_code == 200
            # no webhook, no pages: a worker is not behind the load balancer
            assert investigations.post("/webhook/alertmanager", json=notification()).status_code == 401
            assert investigations.get("/incidents", headers=reader).status_code == 404

            def done() -> bool:
                return site.get(f"/incidents/{incident_id}").json()["incident"]["investigation"] == "done"

            wait_for(done, timeout_s=60)
            assert investigations.get("/metrics").status_code == 401
            metrics = investigations.get("/metrics", headers=reader).text
            assert 'opsagent_investigations_total{outcome="confirmed"} 1.0' in metrics
        report = site.get(f"/incidents/{incident_id}").json()
        assert report["incident"]["outcome"] == "confirmed" and report["report"] is not None
