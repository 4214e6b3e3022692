"""Settings of the sample flows and their fake providers (``FLOWPARK_*`` variables).

They belong to the samples: a node serving only its own flows never reads them, and its
settings table does not list them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from flowpark.settings import ApiToken, Settings

__all__ = [
    "SampleSettings",
    "callback_credential",
    "fakes_admin_token",
    "fakes_state_file",
    "instance_callback_check",
    "instance_callback_token",
]


class SampleSettings(BaseSettings):
    """The samples' settings, each read from ``FLOWPARK_<NAME>``.

    Durations are seconds (floats). URLs left unset mean "this node": the samples then call
    the fake providers the node serves itself.
    """

    model_config = SettingsConfigDict(env_prefix="FLOWPARK_", extra="ignore")

    sample_ocr_per_page: float = Field(
        default=5.0, ge=0, description="Seconds the fake OCR takes per page."
    )
    sample_ocr_call_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Timeout of each call the document sample makes to the OCR provider "
        "(seconds): a call a stalled provider does not answer fails its try after this long.",
    )
    ocr_base_url: str | None = Field(
        default=None, description="Base URL of the OCR provider; default: this node."
    )
    ocr_rate_limit: float | None = Field(
        default=None,
        gt=0,
        description="Calls per second the fake OCR admits (uploads and status reads "
        "together); beyond it, it answers 429 with Retry-After. Unset: no limit.",
    )
    ocr_rate_burst: int | None = Field(
        default=None,
        ge=1,
        description="Calls the fake OCR admits at once above its rate (the bucket's "
        "capacity). Unset: one second's worth of FLOWPARK_OCR_RATE_LIMIT.",
    )
    ocr_callbacks: bool = Field(
        default=True, description="Ask the OCR provider to call the ocr.completed webhook."
    )
    sample_callback_token: SecretStr | None = Field(
        default=None,
        description="The key of the samples' provider tokens: each OCR job's callback "
        "token (an HMAC of the instance's id, accepted with the signal scope on that one "
        "instance's routes only) and the fakes' admin token. Default: derived from "
        "FLOWPARK_API_TOKENS (the same in every process sharing them, and none of them).",
    )
    job_queued_seconds: float = Field(default=2.0, ge=0, description="Fake job: QUEUED time.")
    job_succeed_seconds: float = Field(default=6.0, ge=0, description="Fake job: run time.")
    jobs_base_url: str | None = Field(
        default=None,
        description="Base URL of the job service (/fake/jobs below it) the job.await sample "
        "calls; default: this node.",
    )
    sample_job_heartbeat_seconds: float = Field(
        default=60.0,
        ge=10,
        description="Heartbeat timeout of the job.await sample's job.await capability "
        "(seconds, at least 10): how long a crashed node's try goes unnoticed before another "
        "node retries it.",
    )
    sample_fakes_state_dir: str | None = Field(
        default=None,
        description="Folder where the sample fake providers keep their jobs across restarts "
        "(fake-ocr.jsonl, fake-jobs.jsonl). Unset: beside a SQLite database file "
        "(<file>.fake-ocr.jsonl, ...); in memory only with PostgreSQL.",
    )


def callback_credential(settings: Settings, sample: SampleSettings) -> ApiToken:
    """The samples' provider key: ``FLOWPARK_SAMPLE_CALLBACK_TOKEN``, else an HMAC-SHA256
    keyed by the API tokens: the same in every process sharing them, none of them, and not
    one a caller could compute without them. It is no token any route takes: each OCR job's
    callback token (:func:`instance_callback_token`) and the fakes' admin token
    (:func:`fakes_admin_token`) are made from it.

    Args:
        settings: the node's settings (its API tokens).
        sample: the samples' settings.

    Returns:
        The key, as a credential value (name ``sample-callback``).
    """
    if sample.sample_callback_token is not None:
        value = sample.sample_callback_token.get_secret_value()
    else:
        key = "\n".join(sorted(settings.tokens)).encode("utf-8", "surrogateescape")
        value = "cb-" + hmac.new(key, b"flowpark sample callback", hashlib.sha256).hexdigest()
    return ApiToken("sample-callback", value, frozenset({"signal"}))


#: The name an OCR callback's token acts as (the instance history records it).
CALLBACK_NAME = "sample-callback"


def instance_callback_token(key: str, instance_id: str) -> str:
    """The bearer token of the OCR callbacks of the jobs instance ``instance_id`` uploads.

    Args:
        key: :func:`callback_credential`'s value (the samples' provider key).
        instance_id: the instance whose upload creates the job.

    Returns:
        ``cbi-<hex>``: an HMAC-SHA256 of the id; only a process that knows the key makes it.
    """
    mac = hmac.new(key.encode(), b"ocr callback for " + instance_id.encode(), hashlib.sha256)
    return "cbi-" + mac.hexdigest()


def instance_callback_check(key: str) -> Callable[[str, str], ApiToken | None]:
    """The node's check of a callback token (``Deps.accept_for_instance``): the token of
    :func:`instance_callback_token` for the path's instance opens its signal routes (scope
    ``signal``), and no other instance's.

    Args:
        key: :func:`callback_credential`'s value.

    Returns:
        ``check(token, instance_id)``.
    """

    def check(token: str, instance_id: str) -> ApiToken | None:
        expected = instance_callback_token(key, instance_id)
        if hmac.compare_digest(token.encode(), expected.encode()):
            return ApiToken(CALLBACK_NAME, expected, frozenset({"signal"}))
        return None

    return check


def fakes_admin_token(settings: Settings, sample: SampleSettings) -> str:
    """The bearer token of the fakes' admin routes from off-host (list, complete, cancel;
    loopback clients need none): derived from the same key as the callback tokens.

    Args:
        settings: the node's settings (its API tokens).
        sample: the samples' settings.

    Returns:
        ``fa-<hex>``.
    """
    key = callback_credential(settings, sample).value
    return "fa-" + hmac.new(key.encode(), b"fakes admin", hashlib.sha256).hexdigest()


def fakes_state_file(settings: Settings, sample: SampleSettings, name: str) -> Path | None:
    """Where the fake provider ``name`` (``ocr``) keeps its jobs across restarts.

    Returns:
        ``<sample_fakes_state_dir>/fake-<name>.jsonl`` when set, else
        ``<database file>.fake-<name>.jsonl`` beside a SQLite database file, else None
        (memory only: PostgreSQL, in-memory SQLite).
    """
    if sample.sample_fakes_state_dir:
        folder = Path(sample.sample_fakes_state_dir).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"fake-{name}.jsonl"
    url = settings.database_url
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            database = url[len(prefix) :].split("?", 1)[0]
            if database and database != ":memory:":
                path = Path(database)
                return path.with_name(f"{path.name}.fake-{name}.jsonl")
    return None
