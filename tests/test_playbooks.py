from pathlib import Path

import pytest

from opsagent.errors import PlaybookError
from opsagent.models import FAULT_KINDS, Symptom
from opsagent.packaged import playbooks_dir
from opsagent.playbooks import load_playbooks

REQUIRED_KINDS = {
    "deploy_regression",
    "config_change",
    "thread_pool_exhaustion",
    "db_pool_exhaustion",
    "slow_query",
    "downstream_latency",
    "cpu_saturation",
    "memory_leak",
    "gc_pause",
    "network_degradation",
    "traffic_surge",
    "code_exception",
    "cache_failure",
    "disk_full",
}


def test_shipped_playbooks_load_and_cover_the_taxonomy() -> None:
    books = load_playbooks(playbooks_dir())
    assert len(books) >= 15
    kinds = {b.kind for b in books}
    assert kinds >= REQUIRED_KINDS
    assert kinds & {"certificate_expiry", "dns_failure"}
    assert kinds <= set(FAULT_KINDS)


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "broken.yaml").write_text(text)
    return tmp_path


GOOD_CHECK = """
  - id: a
    tool: metrics.signal
    args: {signal: cpu_usage, service: "{service}"}
    says: x
    confirm: {op: increased}
  - id: b
    tool: logs.summary
    says: y
    confirm: {op: family_burst, family: timeout}
"""


def test_broken_playbook_names_file_and_field(tmp_path: Path) -> None:
    text = "id: p\nkind: not_a_kind\ntitle: t\nprior: 0.2\napplies: {}\nstatement: s\nchecks:" + GOOD_CHECK
    with pytest.raises(PlaybookError) as exc:
        load_playbooks(_write(tmp_path, text))
    message = str(exc.value)
    assert "broken.yaml" in message and "[kind]" in message and "unknown fault kind" in message


def test_unknown_expectation_op_is_rejected(tmp_path: Path) -> None:
    text = "id: p\nkind: gc_pause\ntitle: t\nprior: 0.2\napplies: {}\nstatement: s\nchecks:" + GOOD_CHECK.replace(
        "op: increased", "op: eval_this"
    )
    with pytest.raises(PlaybookError) as exc:
        load_playbooks(_write(tmp_path, text))
    assert "checks.0.confirm.op" in str(exc.value)


def test_expectation_must_match_the_tool(tmp_path: Path) -> None:
    text = "id: p\nkind: gc_pause\ntitle: t\nprior: 0.2\napplies: {}\nstatement: s\nchecks:" + GOOD_CHECK.replace(
        "op: increased", "op: self_time_up"
    )
    with pytest.raises(PlaybookError) as exc:
        load_playbooks(_write(tmp_path, text))
    assert "reads traces" in str(exc.value)


def test_unknown_placeholder_is_rejected(tmp_path: Path) -> None:
    text = (
        "id: p\nkind: gc_pause\ntitle: t\nprior: 0.2\napplies: {}\nstatement: 'boom {password}'\nchecks:" + GOOD_CHECK
    )
    with pytest.raises(PlaybookError) as exc:
        load_playbooks(_write(tmp_path, text))
    assert "unknown placeholder {password}" in str(exc.value)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError) as exc:
        load_playbooks(_write(tmp_path, "id: p\nkind: [unclosed\n"))
    assert "broken.yaml:" in str(exc.value)


def test_match_requires_and_indicators() -> None:
    books = {b.id: b for b in load_playbooks(playbooks_dir())}
    pool = books["db-pool-exhaustion"]
    assert pool.match({"signal:cpu_usage:up": 1.0}, Symptom.latency) is None
    weak = pool.match({"log:timeout": 0.5}, Symptom.latency)
    strong = pool.match({"log:timeout": 0.5, "near_limit:db_connections_used": 1.0, "log:pool": 1}, Symptom.latency)
    assert weak is not None and strong is not None and strong > weak


def test_a_crash_loop_whose_containers_say_why_they_exit_is_that_causes_case() -> None:
    """The crash loop and code-exception playbooks step aside (``unless``) where the workload's last
    log lines name the cause: a name that does not resolve is DNS, refused credentials a setting."""
    books = {b.id: b for b in load_playbooks(playbooks_dir())}
    looping = {"kube:broken": 4.0, "kube:crash_loop": 0.75, "log:new_own_error": 1.0}
    assert books["crash-loop"].match(looping, Symptom.errors) is not None
    assert books["code-exception"].match(looping, Symptom.errors) is not None
    on_dns = {**looping, "kube:exits_on_dns": 0.75, "kube:points_to:dns_failure": 0.75}
    assert books["crash-loop"].match(on_dns, Symptom.errors) is None
    assert books["code-exception"].match(on_dns, Symptom.errors) is None
    assert books["dns-failure"].match(on_dns, Symptom.errors)
    on_auth = {**looping, "kube:exits_on_auth": 0.75, "kube:points_to:config_change": 0.75}
    assert books["workload-misconfigured"].match(on_auth, Symptom.errors)
