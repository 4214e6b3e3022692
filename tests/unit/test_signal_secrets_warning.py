"""A node logs one warning at start-up for each served signal signed with a secret that
``FLOWPARK_SIGNAL_SECRETS`` does not hold (its deliveries would all be refused), naming the
secret, never a value."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from flowpark.flows import Catalog
from flowpark.runtime.app import _warn_about_signal_secrets
from flowpark.runtime.http import outbound_client
from flowpark.runtime.loading import Deps, load_flows, register_flows
from flowpark.settings import Settings

#: the records of the warning's logger only (another test's server may be logging in this
#: process, e.g. a session-scoped one of another module on the same xdist worker)
LOGGER = "flowpark.runtime"
SECRET = "whsec_dGhlLW9jci1wcm92aWRlcnMtc2hhcmVkLXNlY3JldCE="


def _plans(settings: Settings) -> Catalog:
    catalog = Catalog()
    register_flows(catalog, load_flows(["samples"], Deps(outbound_client(1.0), settings)))
    return catalog


def _mine(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def test_a_signed_signal_whose_secret_is_missing_is_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holds = Settings(signal_secrets={"ocr": SecretStr(SECRET)})
    plans = _plans(holds).plans()  # the sample's ocr.completed is signed with "ocr"
    caplog.set_level(logging.WARNING, logger=LOGGER)

    _warn_about_signal_secrets(holds, plans)
    assert _mine(caplog) == []

    _warn_about_signal_secrets(Settings(signal_secrets={}), plans)
    lines = [r.getMessage() for r in _mine(caplog)]
    assert lines == [
        "signal ocr.completed of document.process is signed with the secret 'ocr', which "
        "FLOWPARK_SIGNAL_SECRETS does not hold: every delivery will be refused"
    ]
    assert SECRET not in caplog.text


def test_bearer_signals_need_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(signal_secrets={})
    caplog.set_level(logging.WARNING, logger=LOGGER)
    _warn_about_signal_secrets(settings, _plans(settings).plans())
    assert _mine(caplog) == []
