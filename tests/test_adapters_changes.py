"""Change adapters: git over a real repository made here, and an HTTP JSON change feed (respx)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import respx

from adapters.changes_git.config import PathRule
from adapters.changes_git.reader import GitChangesReader, commit_url_template, git_cli
from adapters.changes_http.config import FeedFields, FeedQuery
from adapters.changes_http.reader import HttpChangesReader
from opsagent.errors import MalformedResponse, SourceAuthFailed, SourceTimeout, SourceUnavailable
from opsagent.fixtures import load
from opsagent.incident import open_incident
from opsagent.models import Incident
from opsagent.sources.live import LiveChanges
from opsagent.sources.replay import ReplayChanges
from tests.conftest import INCIDENTS, ORDER_INCIDENT
from tests.fakes import incident as fake_incident

T0 = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)  # tests.fakes.incident(): window 13:00-14:30, onset 14:02
RULES = [
    PathRule(pattern="apps/{service}/**"),
    PathRule(pattern="infra/**", service="platform", kind="infra"),
]


def _git(repo: Path, *args: str, when: datetime | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Dana Ops",
        "GIT_AUTHOR_EMAIL": "dana@example.com",
        "GIT_COMMITTER_NAME": "Dana Ops",
        "GIT_COMMITTER_EMAIL": "dana@example.com",
    }
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _commit(repo: Path, files: dict[str, str], message: str, when: datetime) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, when=when)


@pytest.fixture(scope="module")
def gitops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("gitops")
    _git(repo, "init", "-q", "-b", "main")
    _commit(
        repo,
        {"apps/checkout/deployment.yaml": "image: registry/checkout:1.4.1\nreplicas: 3\n"},
        "checkout 1.4.1",
        T0 - timedelta(days=2),
    )
    _commit(
        repo,
        {"apps/checkout/deployment.yaml": "image: registry/checkout:1.4.2\nreplicas: 3\n"},
        "Deploy checkout 1.4.2",
        T0 + timedelta(minutes=50),
    )
    _commit(
        repo,
        {"apps/cart/config/application.properties": "pool.max=4\n", "apps/cart/src/Main.java": "class Main {}\n"},
        "Shrink cart pool",
        T0 + timedelta(minutes=55),
    )
    _commit(
        repo,
        {
            "infra/dns.tf": 'resolver = "10.0.0.2"\n',
            "apps/checkout/deployment.yaml": "image: registry/checkout:1.4.2\nreplicas: 6\n",
        },
        "Resolver and scale",
        T0 + timedelta(minutes=58),
    )
    _commit(repo, {"README.md": "docs\n"}, "docs only", T0 + timedelta(minutes=59))
    _commit(
        repo, {"apps/cart/config/application.properties": "pool.max=32\n"}, "after the window", T0 + timedelta(hours=3)
    )
    return repo


def _changes(
    reader: GitChangesReader, incident: Incident, service: str | None = None, before_min: float = 60
) -> list[object]:
    data = asyncio.run(LiveChanges(reader).changes(incident=incident, service=service, before_min=before_min))
    return list(data.changes)


def test_git_commits_in_the_window_mapped_to_services(gitops: Path) -> None:
    reader = GitChangesReader(git_cli(gitops), name="gitops", rules=RULES)
    changes = _changes(reader, fake_incident())
    summary = [(c.service, c.kind, c.summary) for c in changes]  # type: ignore[attr-defined]
    assert summary == [
        ("checkout", "deploy", "Deploy checkout 1.4.2"),
        ("cart", "config", "Shrink cart pool"),
        ("checkout", "scale", "Resolver and scale"),
        ("platform", "infra", "Resolver and scale"),
    ]
    deploy, config, scale, infra = changes
    assert (deploy.from_version, deploy.to_version) == ("1.4.1", "1.4.2")  # type: ignore[attr-defined]
    assert deploy.minutes_before_onset == 12.0 and deploy.author == "Dana Ops <dana@example.com>"  # type: ignore[attr-defined]
    assert "+pool.max=4" in config.diff and "Main.java" in config.diff.splitlines()[0]  # type: ignore[attr-defined]
    assert "class Main" not in config.diff  # code lines are counted, not shown  # type: ignore[attr-defined]
    assert "2 file(s) changed, +2 -0" in config.diff  # type: ignore[attr-defined]
    assert scale.id.endswith(":checkout") and infra.id.endswith(":platform")  # type: ignore[attr-defined]


def test_git_service_filter_and_lookback(gitops: Path) -> None:
    reader = GitChangesReader(git_cli(gitops), name="gitops", rules=RULES)
    assert [c.summary for c in _changes(reader, fake_incident(), service="cart")] == ["Shrink cart pool"]  # type: ignore[attr-defined]
    assert {c.summary for c in _changes(reader, fake_incident(), before_min=5)} == {"Resolver and scale"}  # type: ignore[attr-defined]
    assert _changes(reader, fake_incident(), before_min=3) == []


def test_git_errors(tmp_path: Path, gitops: Path) -> None:
    not_a_repo = GitChangesReader(git_cli(tmp_path), name="gitops", rules=RULES)
    with pytest.raises(SourceUnavailable, match="not a git repository"):
        _changes(not_a_repo, fake_incident())
    bad_ref = GitChangesReader(git_cli(gitops), name="gitops", rules=RULES, ref="no-such-branch")
    with pytest.raises(SourceUnavailable, match="git log failed"):
        _changes(bad_ref, fake_incident())

    async def slow(args: Sequence[str]) -> str:
        raise subprocess.TimeoutExpired(["git", *args], 10)

    with pytest.raises(SourceTimeout):
        _changes(GitChangesReader(slow, name="gitops", rules=RULES), fake_incident())


def test_git_only_reads(gitops: Path) -> None:
    seen: list[str] = []
    inner = git_cli(gitops)

    async def spy(args: Sequence[str]) -> str:
        seen.append(args[0])
        return await inner(args)

    _changes(GitChangesReader(spy, name="gitops", rules=RULES), fake_incident())
    assert set(seen) <= {"log", "show", "config"}  # config --get remote.origin.url: for commit links


def test_a_commit_links_to_its_page_on_the_forge_of_the_origin_remote(tmp_path: Path, gitops: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(gitops), str(clone)], check=True)
    _git(clone, "remote", "set-url", "origin", "https://ci:s3cret@github.com/acme/gitops.git")
    changes = _changes(GitChangesReader(git_cli(clone), name="gitops", rules=RULES), fake_incident())
    sha = _git(clone, "log", "-1", "--format=%H", "--grep", "Deploy checkout").strip()
    deploy = next(c for c in changes if c.summary == "Deploy checkout 1.4.2")  # type: ignore[attr-defined]
    assert deploy.url == f"https://github.com/acme/gitops/commit/{sha}"  # type: ignore[attr-defined]
    assert all("s3cret" not in (c.url or "") for c in changes)  # type: ignore[attr-defined]
    template = GitChangesReader(
        git_cli(gitops), name="gitops", rules=RULES, commit_url="https://code.example/ops/-/c/{sha}"
    )
    assert _changes(template, fake_incident())[0].url == f"https://code.example/ops/-/c/{sha}"  # type: ignore[attr-defined]
    assert all(
        c.url is None for c in _changes(GitChangesReader(git_cli(gitops), name="g", rules=RULES), fake_incident())
    )  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("remote", "template"),
    [
        ("git@github.com:acme/gitops.git", "https://github.com/acme/gitops/commit/{sha}"),
        ("ssh://git@gitlab.example.com:2222/group/ops.git", "https://gitlab.example.com/group/ops/-/commit/{sha}"),
        ("https://bitbucket.org/acme/ops", "https://bitbucket.org/acme/ops/commits/{sha}"),
        ("/srv/git/ops.git", None),
        ("", None),
    ],
)
def test_commit_url_templates_by_forge(remote: str, template: str | None) -> None:
    assert commit_url_template(remote) == template


# ---------------------------------------------------------------- HTTP change feed

FEED = "http://deploys.test"


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


def _order() -> tuple[Incident, list[dict[str, object]]]:
    rec, _ = load(ORDER_INCIDENT)
    incident = open_incident(rec.alert, window=rec.window, baseline=rec.baseline, id=rec.slug)
    # A deploy tracker's own shape: nested, epoch milliseconds, its own kind names.
    items = [
        {
            "uid": c.id,
            "finished_at": int(c.ts.timestamp() * 1000),
            "app": {"name": c.service},
            "type": {"deploy": "deployment"}.get(c.kind, c.kind),
            "title": c.summary,
            "by": c.author,
            "versions": {"old": c.from_version, "new": c.to_version},
            "patch": c.diff,
            "links": {"html": c.url},
        }
        for c in rec.changes
    ]
    return incident, items


def _feed_reader() -> HttpChangesReader:
    return HttpChangesReader(
        httpx.AsyncClient(base_url=FEED, headers={"Authorization": "Bearer t0ken"}),
        name="deploys",
        query=FeedQuery(
            path="/api/v2/deploys", items="result.items", time_format="unix_ms", kinds={"deployment": "deploy"}
        ),
        fields=FeedFields(
            id="uid",
            ts="finished_at",
            service="app.name",
            kind="type",
            summary="title",
            author="by",
            from_version="versions.old",
            to_version="versions.new",
            diff="patch",
            url="links.html",
        ),
    )


def test_feed_with_field_mapping_matches_replay(router: respx.Router) -> None:
    incident, items = _order()
    route = router.get(f"{FEED}/api/v2/deploys").mock(
        return_value=httpx.Response(200, json={"result": {"items": items}})
    )
    rec, _ = load(ORDER_INCIDENT)
    for service in (None, "order-service"):
        got = asyncio.run(LiveChanges(_feed_reader()).changes(incident=incident, service=service, before_min=60))
        want = asyncio.run(ReplayChanges(rec).changes(incident=incident, service=service, before_min=60))
        assert got == want and want.changes
        assert any(c.url for c in got.changes)  # the deploy tracker's page of a change, as the fixture has it
    sent = route.calls[0].request
    assert sent.method == "GET" and sent.headers["authorization"] == "Bearer t0ken"
    assert int(sent.url.params["since"]) == int((incident.onset - timedelta(minutes=60)).timestamp() * 1000)


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(401, json={"message": "invalid token"}), SourceAuthFailed),
        (httpx.Response(500, text="boom"), SourceUnavailable),
        (httpx.Response(200, json={"result": {"items": {"not": "a list"}}}), MalformedResponse),
        (httpx.Response(200, json={"result": {"items": [{"uid": "x"}]}}), MalformedResponse),
        (httpx.ConnectTimeout("slow"), SourceTimeout),
    ],
)
def test_feed_failures_are_mapped(router: respx.Router, response: object, error: type[Exception]) -> None:
    route = router.get(f"{FEED}/api/v2/deploys")
    if isinstance(response, Exception):
        route.mock(side_effect=response)
    else:
        route.mock(return_value=response)
    with pytest.raises(error) as caught:
        asyncio.run(LiveChanges(_feed_reader()).changes(incident=fake_incident(), service=None, before_min=60))
    assert caught.value.source == "changes:deploys"  # type: ignore[attr-defined]


def test_feed_rollouts_carry_their_steps_and_pods_like_a_recording(router: respx.Router) -> None:
    rec, _ = load(INCIDENTS / "cart-rollout-beside-clean-search")
    incident = open_incident(rec.alert, window=rec.window, baseline=rec.baseline, id=rec.slug)
    items = [
        {
            "uid": c.id,
            "started": c.ts.isoformat(),
            "app": c.service,
            "type": c.kind,
            "title": c.summary,
            "by": c.author,
            "patch": c.diff,
            "versions": {"old": c.from_version, "new": c.to_version},
            **({"finished": c.end.isoformat()} if c.end else {}),
            **(
                {
                    "stages": [
                        {"at": s.ts.isoformat(), "index": s.index, "weight": s.weight, "pods": s.pods} for s in c.steps
                    ]
                }
                if c.steps
                else {}
            ),
            **({"replicas": c.pods} if c.pods else {}),
        }
        for c in rec.changes
    ]
    router.get(f"{FEED}/deploys").mock(return_value=httpx.Response(200, json=items))
    reader = HttpChangesReader(
        httpx.AsyncClient(base_url=FEED),
        name="tracker",
        query=FeedQuery(path="/deploys"),
        fields=FeedFields(
            id="uid",
            ts="started",
            kind="type",
            end="finished",
            service="app",
            summary="title",
            author="by",
            diff="patch",
            from_version="versions.old",
            to_version="versions.new",
            steps="stages",
            step_ts="at",
            pods="replicas",
        ),
    )
    got = asyncio.run(LiveChanges(reader).changes(incident=incident, service=None, before_min=60))
    want = asyncio.run(ReplayChanges(rec).changes(incident=incident, service=None, before_min=60))
    assert got == want
    (cart,) = [c for c in got.changes if c.service == "cart-service"]
    assert len(cart.steps) == 2 and cart.pods["6.3.0"] and cart.steps[0].weight == 33
