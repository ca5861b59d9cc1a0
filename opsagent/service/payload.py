"""The Alertmanager webhook payload (version 4), validated on the way in.

Alertmanager documents it at https://prometheus.io/docs/alerting/latest/configuration/#webhook_config.
Unknown fields are allowed (newer Alertmanagers add some); every string must be valid UTF-8 so that
whatever is accepted can be stored and shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from opsagent.incident import SERVICE_KEYS
from opsagent.models import Alert, AlertEnd, AlertTime, require_labels


def _utf8(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("not valid UTF-8 (a lone surrogate?)") from exc
    return text


#: A string that can be stored and shown: valid UTF-8.
Text = Annotated[str, AfterValidator(_utf8)]
LabelSet = dict[Text, Text]


class WebhookAlert(BaseModel):
    """One alert of a notification (``alerts[]``)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    status: Literal["firing", "resolved"]
    labels: Annotated[LabelSet, AfterValidator(require_labels)] = Field(
        description="must hold at least one label, normally alertname"
    )
    annotations: LabelSet = Field(default_factory=dict)
    starts_at: AlertTime = Field(alias="startsAt")
    ends_at: AlertEnd = Field(default=None, alias="endsAt")
    generator_url: Text = Field(default="", alias="generatorURL")
    fingerprint: Text = ""

    def as_alert(self) -> Alert:
        return Alert(
            labels=dict(self.labels),
            annotations=dict(self.annotations),
            starts_at=self.starts_at,
            ends_at=self.ends_at,
            generator_url=self.generator_url or None,
            fingerprint=self.fingerprint or None,
            status=self.status,
        )


class WebhookPayload(BaseModel):
    """What Alertmanager POSTs to a ``webhook_configs`` receiver."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    version: Literal["4"]
    group_key: Text = Field(alias="groupKey", min_length=1, max_length=4096)
    #: Alertmanager's uint64: a count beyond it is not one it could have sent
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts", ge=0, le=2**64 - 1)
    status: Literal["firing", "resolved"]
    receiver: Text
    group_labels: LabelSet = Field(default_factory=dict, alias="groupLabels")
    common_labels: LabelSet = Field(default_factory=dict, alias="commonLabels")
    common_annotations: LabelSet = Field(default_factory=dict, alias="commonAnnotations")
    external_url: Text = Field(default="", alias="externalURL")
    alerts: list[WebhookAlert] = Field(min_length=1)

    @property
    def firing(self) -> list[WebhookAlert]:
        return [a for a in self.alerts if a.status == "firing"]

    def candidates(self) -> list[WebhookAlert]:
        """Alerts worth investigating, earliest first: the firing ones, or all when none fires."""
        return sorted(self.firing or self.alerts, key=lambda a: a.starts_at)

    def summary(self) -> Summary:
        """What an incident is listed by: service, alert name, title (from the earliest firing alert)."""
        lead = self.candidates()[0]
        labels = {**lead.labels, **self.common_labels}
        service = next((labels[k] for k in SERVICE_KEYS if labels.get(k)), "unknown")
        alertname = labels.get("alertname", "alert")
        title = self.common_annotations.get("summary") or lead.annotations.get("summary")
        return Summary(service=service, alertname=alertname, title=title or f"{alertname} on {service}", lead=lead)


@dataclass(frozen=True)
class Summary:
    service: str
    alertname: str
    title: str
    lead: WebhookAlert


class GrafanaAlert(WebhookAlert):
    """One alert of a Grafana-managed notification: Alertmanager's fields, plus Grafana's links
    (``dashboardURL``, ``panelURL``, ``silenceURL``) and the query values that fired it, kept as
    extra fields of the alert."""

    dashboard_url: Text = Field(default="", alias="dashboardURL")
    panel_url: Text = Field(default="", alias="panelURL")
    silence_url: Text = Field(default="", alias="silenceURL")
    values: dict[Text, float | None] | None = None
    value_string: Text | None = Field(default=None, alias="valueString")


class GrafanaPayload(BaseModel):
    """What Grafana-managed alerting POSTs to a webhook contact point (payload ``version`` "1"),
    documented at https://grafana.com/docs/grafana/latest/alerting/configure-notifications/
    manage-contact-points/integrations/webhook-notifier/. Close to Alertmanager's, with ``orgId``,
    ``state``, ``title`` and ``message`` beside it; :meth:`as_alertmanager` turns it into
    Alertmanager's, which is what the service stores and investigates."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    version: Literal["1"]
    group_key: Text = Field(alias="groupKey", min_length=1, max_length=4096)
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts", ge=0, le=2**64 - 1)
    status: Literal["firing", "resolved"]
    receiver: Text
    org_id: int = Field(alias="orgId", ge=0)
    group_labels: LabelSet = Field(default_factory=dict, alias="groupLabels")
    common_labels: LabelSet = Field(default_factory=dict, alias="commonLabels")
    common_annotations: LabelSet = Field(default_factory=dict, alias="commonAnnotations")
    external_url: Text = Field(default="", alias="externalURL")
    title: Text = ""
    state: Text = ""
    message: Text = ""
    alerts: list[GrafanaAlert] = Field(min_length=1)

    def as_alertmanager(self) -> WebhookPayload:
        """The same notification as Alertmanager's version 4. Its group key is Grafana's, prefixed
        by the organisation, so it never dedups with an Alertmanager group of the same labels."""
        alerts = [WebhookAlert.model_validate(a.model_dump(by_alias=True, mode="json")) for a in self.alerts]
        return WebhookPayload(
            version="4",
            group_key=f"grafana/{self.org_id}:{self.group_key}",
            truncated_alerts=self.truncated_alerts,
            status=self.status,
            receiver=self.receiver,
            group_labels=self.group_labels,
            common_labels=self.common_labels,
            common_annotations=self.common_annotations,
            external_url=self.external_url,
            alerts=alerts,
        )
