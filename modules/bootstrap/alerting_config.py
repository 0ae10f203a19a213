"""Stack config for where alerts go (the ``alerting`` section of a cluster stack).

Receivers are typed (webhook, email, Microsoft Teams, PagerDuty). No value that lets someone page or
post on the team's behalf is written here: a routing key, a Teams webhook URL (it carries its own
signature), an SMTP password or a webhook's bearer token is named by its Key Vault secret
(``*_secret``), which the operator sets in the cluster's vault (docs/oncall.md "Receivers and their
secrets"). The Prometheus hosts read it into a file Alertmanager reads (``*_file`` settings).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modules.config_model import StrictModel

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")
"""critical pages a person now; warning is looked at within the working day; info is context only."""

# Key Vault object names: 1-127 letters, digits and dashes (Azure "Key Vault keys, secrets and
# certificates overview", object identifiers). The host adds a prefix and a digest (alerting.py).
_SECRET = re.compile(r"^[0-9A-Za-z-]{1,60}$")
_DURATION = re.compile(r"^[1-9][0-9]*(s|m|h)$")
_RECEIVER = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")


def _secret(value: str | None, key: str) -> str | None:
    if value is not None and not _SECRET.match(value):
        raise ValueError(
            f"{key} {value!r} is not a Key Vault secret name: use up to 60 letters, digits and '-' "
            "(the name, never the secret itself)"
        )
    return value


class WebhookReceiver(StrictModel):
    """Alertmanager's webhook: a JSON POST of each group of alerts (a ticketing or chat bridge)."""

    url: str = Field(description="Endpoint (https://, or http:// inside the private network).")
    bearer_token_secret: str | None = Field(
        default=None, description="Key Vault secret holding a bearer token sent as Authorization (optional)."
    )
    send_resolved: bool = Field(default=True, description="Also post when the alerts resolve.")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://")):
            raise ValueError(f"url {v!r} is not an http(s) URL: use e.g. https://tickets.example.com/alertmanager")
        return v

    @field_validator("bearer_token_secret")
    @classmethod
    def _token(cls, v: str | None) -> str | None:
        return _secret(v, "bearer_token_secret")


class EmailReceiver(StrictModel):
    """Mail through the organisation's relay (STARTTLS required)."""

    to: list[str] = Field(min_length=1, description="Recipients.")
    sender: str = Field(description="From address.")
    smarthost: str = Field(description="SMTP relay as host:port, e.g. smtp.example.com:587.")
    username: str | None = Field(default=None, description="SMTP login (with password_secret).")
    password_secret: str | None = Field(default=None, description="Key Vault secret holding the SMTP password.")

    @field_validator("to")
    @classmethod
    def _to(cls, v: list[str]) -> list[str]:
        for address in v:
            if not _EMAIL.match(address):
                raise ValueError(f"to {address!r} is not an email address: use e.g. oncall@example.com")
        return v

    @field_validator("sender")
    @classmethod
    def _sender(cls, v: str) -> str:
        if not _EMAIL.match(v):
            raise ValueError(f"sender {v!r} is not an email address: use e.g. alertmanager@example.com")
        return v

    @field_validator("smarthost")
    @classmethod
    def _smarthost(cls, v: str) -> str:
        if not _HOSTPORT.match(v):
            raise ValueError(f"smarthost {v!r} is not host:port: use e.g. smtp.example.com:587")
        return v

    @field_validator("password_secret")
    @classmethod
    def _password(cls, v: str | None) -> str | None:
        return _secret(v, "password_secret")

    @model_validator(mode="after")
    def _login(self) -> EmailReceiver:
        if (self.username is None) != (self.password_secret is None):
            raise ValueError("username and password_secret go together: give both for SMTP AUTH, or neither")
        return self


class TeamsReceiver(StrictModel):
    """A Microsoft Teams channel through a Workflows ("Post to a channel when a webhook request is
    received") webhook: Alertmanager's msteamsv2 integration."""

    webhook_url_secret: str = Field(description="Key Vault secret holding the workflow's webhook URL.")
    send_resolved: bool = Field(default=True, description="Also post when the alerts resolve.")

    @field_validator("webhook_url_secret")
    @classmethod
    def _url(cls, v: str) -> str:
        return _secret(v, "webhook_url_secret") or v


class PagerDutyReceiver(StrictModel):
    """A PagerDuty service through its Events API v2 integration."""

    routing_key_secret: str = Field(description="Key Vault secret holding the integration's routing key.")

    @field_validator("routing_key_secret")
    @classmethod
    def _key(cls, v: str) -> str:
        return _secret(v, "routing_key_secret") or v


class ReceiverConfig(StrictModel):
    """One named receiver: every integration listed is notified."""

    webhook: list[WebhookReceiver] = Field(default_factory=list, description="Webhooks.")
    email: list[EmailReceiver] = Field(default_factory=list, description="Mail.")
    msteams: list[TeamsReceiver] = Field(default_factory=list, description="Microsoft Teams channels.")
    pagerduty: list[PagerDutyReceiver] = Field(default_factory=list, description="PagerDuty services.")

    @model_validator(mode="after")
    def _something(self) -> ReceiverConfig:
        if not (self.webhook or self.email or self.msteams or self.pagerduty):
            raise ValueError("a receiver with no integration reaches nobody: add webhook, email, msteams or pagerduty")
        return self


def _duration(v: str, key: str) -> str:
    if not _DURATION.match(v):
        raise ValueError(f"{key} {v!r} is not a duration: use e.g. '30s', '5m' or '4h'")
    return v


class AlertingConfig(StrictModel):
    """Alertmanager on the Prometheus hosts: who is told of each severity, and how often."""

    receivers: dict[str, ReceiverConfig] = Field(min_length=1, description="Receivers by name.")
    routes: dict[Severity, list[str]] = Field(
        description="Receivers of each severity (critical, warning, info), in order; every severity "
        "the shipped rules use must be routed: critical and warning at least.",
    )
    group_wait: str = Field(default="30s", description="Wait before the first notification of a new group.")
    group_interval: str = Field(default="5m", description="Wait before notifying a group's new alerts.")
    repeat_interval: str = Field(default="4h", description="Re-notify a group that still fires after this.")
    runbook_base_url: str = Field(
        default="",
        description="Prefix of every alert's runbook_url (this repository's web address, e.g. "
        "https://github.com/<org>/azure-gpu-k8s/blob/main/); empty leaves the path inside the repository.",
    )

    @field_validator("receivers")
    @classmethod
    def _names(cls, v: dict[str, ReceiverConfig]) -> dict[str, ReceiverConfig]:
        for name in v:
            if not _RECEIVER.match(name):
                raise ValueError(
                    f"{name!r} is not a receiver name: use 2-40 lowercase letters, digits and '-', starting with a letter"
                )
        return v

    @field_validator("group_wait", "group_interval", "repeat_interval")
    @classmethod
    def _durations(cls, v: str, info: object) -> str:
        return _duration(v, str(getattr(info, "field_name", "duration")))

    @field_validator("runbook_base_url")
    @classmethod
    def _base(cls, v: str) -> str:
        if v and not (v.startswith("https://") and v.endswith("/")):
            raise ValueError(f"runbook_base_url {v!r}: use an https:// address ending in '/', or leave it empty")
        return v

    @model_validator(mode="after")
    def _routed(self) -> AlertingConfig:
        for severity, names in self.routes.items():
            if not names:
                raise ValueError(f"routes.{severity} is empty: name at least one receiver, or remove the severity")
            for name in names:
                if name not in self.receivers:
                    raise ValueError(
                        f"routes.{severity}: no receiver {name!r}: use one of {', '.join(sorted(self.receivers))}"
                    )
        for severity in ("critical", "warning"):
            if severity not in self.routes:
                raise ValueError(f"routes.{severity} is missing: every {severity} alert must reach someone; add it")
        return self
