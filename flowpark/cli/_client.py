"""What the operator commands share: exit codes, consoles, common options, the HTTP
client that turns refusals into exit codes, and small renderers."""

from __future__ import annotations

import functools
import inspect
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn
from urllib.parse import quote

import httpx
import typer
from rich.table import Table

from flowpark.cli.consoles import SafeConsole, err, json_text, out
from flowpark.cli.times import duration_seconds, instant_text
from flowpark.errors import ErrorCode
from flowpark.redaction import redact
from flowpark.settings import DEFAULT_API_TOKEN

if TYPE_CHECKING:
    from flowpark.client import ProblemError

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_ERROR",
    "EXIT_FORBIDDEN",
    "EXIT_NOT_FOUND",
    "EXIT_UNREACHABLE",
    "DEFAULT_URL",
    "AsJson",
    "Key",
    "State",
    "Token",
    "Url",
    "WHOLE_ID_COLUMNS",
    "Waiting",
    "err",
    "is_loopback",
    "out",
    "print_table",
    "segment",
    "shown_id",
    "usage_error",
    "with_filters",
]

#: A canonical instance id, and the start of one the CLI completes.
_FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]{3,34}")
#: The console's short form of an id: its first and last characters around an ellipsis.
_SHORT_ID = re.compile(r"(?P<start>[0-9a-f][0-9a-f-]{3,34})(?:…|\.\.\.)(?P<end>[0-9a-f-]{1,31})")
#: Pages of a prefix's ids looked through for a short form's end before asking for more.
_MOST_PAGES = 5

EXIT_ERROR = 1
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_CONFLICT = 5
EXIT_FORBIDDEN = 6

_ENDED = ("completed", "failed", "cancelled")

# Piped or redirected (and no COLUMNS set), a table keeps one row per line whatever its
# width, so it can be grepped and its ids copied; on a terminal, rich fits it to the terminal.
_PIPED_WIDTH = 100_000


#: Terminal columns under which a table shows an instance id in the console's short form.
WHOLE_ID_COLUMNS = 120


def shown_id(instance_id: str) -> str:
    """An instance id as a table shows it: whole when piped or on a terminal of
    :data:`WHOLE_ID_COLUMNS` columns or more, else the console's short form (its first 8
    and last 6 characters around an ellipsis, ``01a242e6…3058c5``), which every command
    that takes an id takes too."""
    fitted = out.is_terminal or "COLUMNS" in os.environ
    if not fitted or out.width >= WHOLE_ID_COLUMNS or len(instance_id) <= 15:
        return instance_id
    return f"{instance_id[:8]}…{instance_id[-6:]}"


def usage_error(message: str) -> NoReturn:
    """Print ``error: usage: <message>`` (one line, on stderr) and exit 2.

    Raises:
        typer.Exit: always, with code 2.
    """
    err.print(f"error: {ErrorCode.USAGE}: {message}", markup=False)
    raise typer.Exit(2)


def print_table(table: Table) -> None:
    """Print ``table`` on stdout: fitted to a terminal, one line per row when piped."""
    if out.is_terminal or "COLUMNS" in os.environ:
        out.print(table)
    else:  # rich caps a print's width at its console's: print through a wide one
        SafeConsole(file=out.file, highlight=False, width=_PIPED_WIDTH).print(table)


class State(StrEnum):
    running = "running"
    suspended = "suspended"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


class Waiting(StrEnum):
    poll = "poll"
    retry = "retry"
    signal = "signal"
    deadline = "deadline"
    provider_budget = "provider_budget"  # a deferred try: its provider had no budget
    provider_pushback = "provider_pushback"  # a try its provider pushed back (429/503)


Url = Annotated[
    str, typer.Option("--url", envvar="FLOWPARK_URL", metavar="URL", help="The node's base URL.")
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FLOWPARK_TOKEN",
        metavar="TOKEN",
        help="Bearer token. Default: none, but a loopback --url (127.0.0.1, ::1, localhost) "
        "is sent the local trial's dev-token, as a node with FLOWPARK_API_TOKENS unset takes.",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
Key = Annotated[
    str | None, typer.Option("--key", metavar="KEY", help="Idempotency-Key: a repeat acts no more.")
]
DEFAULT_URL = "http://127.0.0.1:8000"


class _Filters:
    """The list's filters as options (the API's query parameters)."""

    def __init__(
        self,
        flow: str | None,
        version: str | None,
        state: list[State] | None,
        overdue: str | None,
        stuck: bool,
        error_code: str | None,
        waiting: Waiting | None,
        instance_key: str | None,
        created_after: str | None,
        created_before: str | None,
        display_key: str | None = None,
        compensation_failed: bool = False,
    ) -> None:
        self.values: dict[str, Any] = {
            "displayKey": display_key,
            "flow": flow,
            "version": version,
            "state": [s.value for s in state] if state else None,
            "overdue": None if overdue is None else duration_seconds(overdue, "--overdue"),
            "stuck": True if stuck else None,
            "errorCode": error_code,
            "compensationFailed": True if compensation_failed else None,
            "waiting": waiting.value if waiting else None,
            "instanceKey": instance_key,
            "createdAfter": (
                None if created_after is None else instant_text(created_after, "--created-after")
            ),
            "createdBefore": (
                None if created_before is None else instant_text(created_before, "--created-before")
            ),
        }
        after, before = self.values["createdAfter"], self.values["createdBefore"]
        if after and before and datetime.fromisoformat(after) >= datetime.fromisoformat(before):
            usage_error(
                f"--created-after ({after}) is not before --created-before ({before}): "
                "no instance was created between them"
            )

    def query(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v is not None}

    def body(self) -> dict[str, Any]:
        return self.query()

    def any(self) -> bool:
        return bool(self.query())


FlowOpt = Annotated[str | None, typer.Option("--flow", metavar="NAME", help="Flow name.")]
VersionOpt = Annotated[
    str | None, typer.Option("--version", metavar="VERSION", help="Flow version.")
]
StateOpt = Annotated[
    list[State] | None, typer.Option("--state", help="State (repeat for any of several).")
]
OverdueOpt = Annotated[
    str | None,
    typer.Option(
        "--overdue",
        metavar="DURATION",
        help="Suspended with wakeAt more than this long ago (90, 15m, 2h, PT2H).",
    ),
]
StuckOpt = Annotated[bool, typer.Option("--stuck", help="Running with an expired lease.")]
ErrorOpt = Annotated[str | None, typer.Option("--error-code", metavar="CODE", help="Error code.")]
CompensationOpt = Annotated[
    bool,
    typer.Option("--compensation-failed", help="Ended with a compensation that failed for good."),
]
WaitingOpt = Annotated[Waiting | None, typer.Option("--waiting", help="What it waits for.")]
KeyOpt = Annotated[str | None, typer.Option("--instance-key", metavar="KEY", help="Instance key.")]
_INSTANT = "An instant: ISO-8601 (without an offset: UTC), now, today, yesterday, or 2h (ago)."
AfterOpt = Annotated[
    str | None,
    typer.Option(
        "--created-after",
        metavar="INSTANT",
        help=_INSTANT,
    ),
]
DisplayOpt = Annotated[
    str | None,
    typer.Option(
        "--display-key", metavar="VALUE", help="The flow's display key value (e.g. a documentId)."
    ),
]
BeforeOpt = Annotated[
    str | None,
    typer.Option(
        "--created-before",
        metavar="INSTANT",
        help=_INSTANT,
    ),
]

#: The list's filter options, declared once: ``(parameter of _Filters, option, default)``.
_FILTER_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("flow", FlowOpt, None),
    ("version", VersionOpt, None),
    ("state", StateOpt, None),
    ("overdue", OverdueOpt, None),
    ("stuck", StuckOpt, False),
    ("error_code", ErrorOpt, None),
    ("waiting", WaitingOpt, None),
    ("instance_key", KeyOpt, None),
    ("created_after", AfterOpt, None),
    ("created_before", BeforeOpt, None),
    ("display_key", DisplayOpt, None),
    ("compensation_failed", CompensationOpt, False),
)


def with_filters(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the list's filter options (``--flow`` ... ``--created-before``).

    The command declares one keyword-only parameter ``filters: _Filters`` where the options
    go (their place in ``--help``); typer sees the options instead, and the command is
    called with them gathered into that one :class:`_Filters`.

    Args:
        command: the command function, with a keyword-only ``filters`` parameter.

    Returns:
        The function to register with typer.

    Raises:
        TypeError: ``command`` has no keyword-only ``filters`` parameter.
    """
    signature = inspect.signature(command, eval_str=True)
    names = [name for name, _, _ in _FILTER_OPTIONS]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=hint, default=default)
        for name, hint, default in _FILTER_OPTIONS
    ]
    declared = list(signature.parameters.values())
    at = next((i for i, p in enumerate(declared) if p.name == "filters"), None)
    if at is None or declared[at].kind is not inspect.Parameter.KEYWORD_ONLY:
        raise TypeError(f"{command.__name__} declares no keyword-only filters parameter")
    params = [*declared[:at], *options, *declared[at + 1 :]]

    @functools.wraps(command)
    def with_options(*args: Any, **kwargs: Any) -> None:
        filters = _Filters(**{name: kwargs.pop(name) for name in names})
        command(*args, filters=filters, **kwargs)

    with_options.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    with_options.__annotations__ = {}  # the signature's (evaluated) annotations hold
    return with_options


def segment(value: str) -> str:
    """``value`` (an instance id, a flow or signal name as typed) quoted as one path
    segment: a ``/``, ``?``, ``#``, ``..`` or a control character in it never changes
    which route is called, and the node answers it as the id or name it is."""
    return quote(value, safe="")


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine by its loopback address (``127.0.0.0/8``,
    ``::1``) or as ``localhost``; no name is resolved."""
    try:
        host = httpx.URL(url).host
    except (httpx.InvalidURL, ValueError, TypeError):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Api:
    """A node's HTTP API through :class:`flowpark.client.Client`; every error leaves as
    ``typer.Exit`` with its exit code.

    Without a token (no ``--token``, ``FLOWPARK_TOKEN`` unset or empty), a loopback URL is
    sent the local trial's documented default token (``dev-token``, what a node whose
    ``FLOWPARK_API_TOKENS`` is unset accepts); any other URL is sent none. A loopback URL
    is reached directly, whatever ``HTTP_PROXY`` / ``ALL_PROXY`` say.
    """

    def __init__(self, url: str, token: str | None) -> None:
        try:
            parsed = httpx.URL(url)
            problem = None if parsed.scheme in ("http", "https") and parsed.host else ""
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            problem = f": {exc}"
        if problem is not None:
            what = "is not a node URL (http:// or https:// and a host)"
            line = f"error: {ErrorCode.USAGE}: --url {url} {what}{problem}"
            err.print(redact(line), markup=False)
            raise typer.Exit(2)
        loopback = is_loopback(url)
        self.dev_default = not token and loopback
        self.token = DEFAULT_API_TOKEN if self.dev_default else (token or None)
        # A loopback node is this machine: it is reached directly, never through a proxy
        # from HTTP_PROXY / ALL_PROXY (which would be sent the token, dev-token included,
        # and would reach its own loopback, not this one).
        self.http = httpx.Client(trust_env=False) if loopback else None
        # imported here: it brings the API's answer models, which `flowpark worker`
        # (this module's importer too) never needs
        from flowpark.client import Client

        self.client = Client(url, token=self.token, http=self.http)
        self.url = url

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        key: str | None = None,
    ) -> Any:
        from flowpark.client import ProblemError, TransportError

        try:
            return self.client.request(method, path, params=params, body=body, idempotency_key=key)
        except ValueError as exc:  # a key the node would refuse: said as the node says it
            err.print(f"error: {ErrorCode.IDEMPOTENCY_KEY_INVALID}: --key: {exc}", markup=False)
            raise typer.Exit(EXIT_ERROR) from None
        except TransportError as exc:
            cause: BaseException | None = exc.__cause__
            why = str(cause) if cause is not None else str(exc)
            while cause is not None:
                if isinstance(cause, socket.gaierror):
                    why = f"the name {httpx.URL(self.url).host} does not resolve ({cause})"
                    break
                cause = cause.__cause__ or cause.__context__
            message = redact(
                f"error: {ErrorCode.UNREACHABLE}: cannot reach {self.url}: {why} (is a node "
                "serving there? pass its URL with --url or set FLOWPARK_URL)"
            )
            err.print(message, markup=False)
            raise typer.Exit(EXIT_UNREACHABLE) from None
        except ProblemError as exc:
            raise self._refused(exc) from None

    def _refused(self, exc: ProblemError) -> typer.Exit:
        problem = exc.problem
        detail = problem.detail + _field_errors(problem.errors)
        if exc.status == 401 and self.dev_default:
            detail += (
                f" (no token given: the CLI sent the local default {DEFAULT_API_TOKEN}, "
                "which this node does not accept; pass --token or set FLOWPARK_TOKEN to "
                "one of the node's FLOWPARK_API_TOKENS)"
            )
        elif exc.status == 401 and not self.token:
            detail += " (pass --token or set FLOWPARK_TOKEN)"
        err.print(redact(f"error: {problem.code}: {detail}"), markup=False)
        if exc.status in (401, 403):
            return typer.Exit(EXIT_FORBIDDEN)
        if exc.status == 404:
            return typer.Exit(EXIT_NOT_FOUND)
        if exc.status == 409:
            return typer.Exit(EXIT_CONFLICT)
        return typer.Exit(EXIT_ERROR)

    def resolve(self, instance_id: str) -> str:
        """The full id of ``instance_id``: a full id (any case), the start of one (4
        characters or more), or the console's short form (``01a242e6…3058c5``: its start
        and end around an ellipsis, or ``...``), when one instance id matches.

        Raises:
            typer.Exit: 2 when it is no id, a start or a short form (too short, other
                characters), or several ids match; 4 when none does.
        """
        text = instance_id.strip().lower()
        if _FULL_ID.fullmatch(text):
            return text
        short = _SHORT_ID.fullmatch(text)
        if short is None and not _ID_PREFIX.fullmatch(text):
            usage_error(
                f"{instance_id!r} is no instance id: give the id, its first 4 characters or "
                "more, or the console's short form (01a242e6…3058c5)"
            )
        found = self._ids_starting(short["start"] if short else text, short["end"] if short else "")
        if not found:
            err.print(f"error: instance_not_found: no instance id matches {text}", markup=False)
            raise typer.Exit(EXIT_NOT_FOUND)
        if len(found) > 1:
            usage_error(f"more than one instance id matches {text}: give more of it")
        return found[0]

    def _ids_starting(self, start: str, end: str) -> list[str]:
        """Up to two ids that start with ``start`` and end with ``end``, looked for in the
        first :data:`_MOST_PAGES` pages of ids with that start (exit 2 past them)."""
        found: list[str] = []
        params: dict[str, Any] = {"idPrefix": start, "limit": 1000 if end else 2}
        for _ in range(_MOST_PAGES):
            page = self.call("GET", "/api/v1/instances", params=params)
            found += [
                str(r["instanceId"]) for r in page["instances"] if r["instanceId"].endswith(end)
            ]
            if len(found) > 1 or not end or not page.get("nextCursor"):
                return found[:2]
            params["cursor"] = page["nextCursor"]
        usage_error(f"too many instance ids start with {start}: give more of its start")


def _field_errors(errors: Any) -> str:
    """The first few of a problem's field errors, as ``" (extendBy: Input should be ...)"``:
    which parameter the node refused, and why (empty when the problem lists none)."""
    if not isinstance(errors, list) or not errors:
        return ""
    parts = []
    for error in errors[:3]:
        if not isinstance(error, dict):
            continue
        loc = [str(p) for p in error.get("loc", []) if p not in ("body", "query", "path")]
        parts.append(f"{'.'.join(loc) or 'body'}: {error.get('msg')}")
    return f" ({'; '.join(parts)})" if parts else ""


@contextmanager
def _api(url: str, token: str | None) -> Iterator[_Api]:
    api = _Api(url, token)
    try:
        yield api
    finally:
        api.client.close()
        if api.http is not None:
            api.http.close()


def _json(value: Any) -> None:
    typer.echo(json_text(value))


def _short(instant: str | None) -> str:
    if not instant:
        return "-"
    return instant.replace("T", " ").split(".")[0].rstrip("Z") + "Z"


def _waiting(row: dict[str, Any]) -> str:
    waiting = row.get("waiting")
    if not waiting:
        return "-"
    text = str(waiting["kind"])
    if waiting.get("attempt") is not None:
        text += f" #{waiting['attempt']}"
    undoes = waiting.get("undoes")
    if undoes:  # a compensation's next try: the compensating capability, the step undone
        return (
            f"{text} compensation {waiting.get('capabilityId')} undoing step "
            f"{undoes['stepId']} ({undoes['label']})"
        )
    if waiting.get("capabilityId"):
        text += f" {waiting['capabilityId']}"
    return text
