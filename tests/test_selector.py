import pytest

from opsagent.selector import SelectorError, parse


def test_parses_name_and_matchers() -> None:
    sel = parse('http_requests{service="a", code=~"5..", pod!="x"}')
    assert sel.name == "http_requests"
    assert [(m.label, m.op, m.value) for m in sel.matchers] == [
        ("service", "=", "a"),
        ("code", "=~", "5.."),
        ("pod", "!=", "x"),
    ]
    assert sel.matchers[1].matches("503") and not sel.matchers[1].matches("200")


def test_vector_constant() -> None:
    assert parse("vector(1)").constant == 1.0


@pytest.mark.parametrize("query", ["rate(x[5m])", "x{service=}", "sum by (a) (x)"])
def test_rejects_what_replay_cannot_evaluate(query: str) -> None:
    with pytest.raises(SelectorError):
        parse(query)


def test_environment_override_keeps_the_defaults_it_does_not_restate() -> None:
    from opsagent.catalog import default_catalog
    from opsagent.fixtures import SignalDef

    base = default_catalog()
    override = SignalDef.model_validate({"query": 'http_server_requests_seconds_p99{application="$service"}'})
    merged = base.merged({"latency_p99": override, "queue_lag": SignalDef(query='kafka_lag{app="$service"}')})
    latency = merged.get("latency_p99")
    assert latency is not None and latency.query.startswith("http_server_requests_seconds_p99")
    assert latency.direction == "up" and latency.min_delta == base.signals["latency_p99"].min_delta
    assert merged.query("queue_lag", "a") == 'kafka_lag{app="a"}'
    assert merged.signal_of("http_server_requests_seconds_p99") == "latency_p99"
