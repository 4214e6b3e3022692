"""One meaning per word (docs/concepts.md), kept as the error contract keeps its codes.

An *attempt* is one iteration of a parked poll (its number is the journal row's scope); a
*try* is one execution under a retry policy; a *node* is one running flowpark process; a
*step* is one entry of a plan. Code, API fields, columns, settings, console text and docs
may use "attempt" and "node" only where those meanings are meant: a name that says
"attempt" outside the modules that show poll attempts, or "node" outside the modules that
run or describe a process, fails here. A new use is added to the lists below on purpose,
after checking it means what docs/concepts.md says.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import flowpark.store.provider_tables  # noqa: F401 - registers the providers' tables
from flowpark.settings import Settings
from flowpark.store.tables import metadata

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("app", "flowpark")

#: Names that say "attempt", by module: each one is about a parked poll's attempts.
ATTEMPT_NAMES: dict[str, set[str]] = {
    "flowpark/api/explain.py": {"AttemptView", "attempt", "attempts_view"},
    "flowpark/api/models/__init__.py": {"AttemptView"},
    "flowpark/api/models/instances.py": {"AttemptView", "attempt", "attempts"},
    "flowpark/api/models/operator.py": {"attempt"},
    "flowpark/cli/instances.py": {"attempt", "attempts"},  # the attempts table
    "flowpark/cli/demo.py": {
        "_last_attempt",
        "attempt",
        "attempts",
    },  # journal rows of a poll attempt
    "flowpark/engine/observe.py": {"attempted"},
    "flowpark/engine/decide/decisions.py": {
        "attempt"
    },  # a poll note: the attempt a verdict is about
    "flowpark/engine/execute/executor.py": {
        "attempt",
        "attempted",
    },  # the observer hears a poll attempt end
    "flowpark/engine/decide/steps.py": {
        "attempt",
        "attempt_due",
        "attempts",
    },  # poll attempts (notes, the timeout)
    "flowpark/flows/durations.py": {"attempt"},  # Backoff: the wait after poll attempt n
    "flowpark/runtime/metrics.py": {"attempts"},  # flowpark_attempts: poll attempts
    "flowpark/runtime/observe.py": {"attempted", "attempts"},
    "flowpark/store/overview.py": {"AttemptStart", "MAX_ATTEMPT_STARTS", "attempt_starts"},
    "flowpark/engine/ports/operator.py": {"AttemptStart", "attempt_starts"},
    "flowpark/store/memory_reads.py": {"AttemptStart", "attempt_starts"},
    "flowpark/ui/instances.py": {"attempts", "attempts_view", "next_attempt"},
    "flowpark/ui/overview.py": {"AttemptStart"},
    "flowpark/ui/pages.py": {"attempt_starts"},
    "flowpark/ui/timeline.py": {"attempt", "attempts", "next_attempt"},
}

#: Modules about plans and their steps: no name in them says "node" (but ``node_id``, the
#: process a log line or a lease names).
PLAN_MODULES = (
    "flowpark/api/explain.py",
    "flowpark/api/plans.py",
    "flowpark/cli/flows.py",
    "flowpark/engine/context.py",
    "flowpark/engine/decide/deadlines.py",
    "flowpark/engine/decide/try_walk.py",
    "flowpark/engine/execute/tries.py",
    "flowpark/engine/decide/steps.py",
    "flowpark/flows/",
    "flowpark/ui/graph.py",
    "flowpark/ui/timeline.py",
)

#: A name anywhere that puts "node" beside a plan's words means a step.
PLAN_NODE_NAME = re.compile(
    r"(step|poll|await|emit|fail|signal|plan|graph|wait|body|capability)_?nodes?"
    r"|nodes?_?(index|kind|label|waiting|target)",
    re.IGNORECASE,
)

#: Names retired from the code, tests and benchmarks: each meant another word.
RETIRED_NAMES = {
    "attempt_scope",
    "attempt_started_at",
    "attempt_step_id",
    "attempt_try",
    "AwaitSignalNode",
    "delivery_max_attempts",
    "EmitNode",
    "FailNode",
    "maximum_attempts",
    "NO_ATTEMPT",
    "PollNode",
    "start_attempt",
    "StepNode",
}

#: Phrases no text says (docs, docstrings, console templates): each used one word for another.
FORBIDDEN_PHRASES = (
    r"\bplan nodes?\b",
    r"\bplan of nodes\b",
    r"\bearlier nodes? puts?\b",
    r"\b(?:poll|await|emit|fail|step|signal|wait)(?:'s)? nodes?\b",
    r"\bnode (?:list|index|kinds?)\b",
    r"\b(?:at|of) node \d",
    r"\bnode\.unreachable\b",
    r"\bmaximum_?attempts\b",
    r"\bctx\.attempt\b",
    r"\battempt_(?:step_id|scope|try|started_at)\b",
    r"\bDELIVERY_MAX_ATTEMPTS\b",
    r"\b(?:ran out of|its|two|the second) sends\b",
    r"\bsends (?:made|were made|ran out)\b",
    r"\bDESIGN\.md\b",  # not in the repository: docs/concepts.md defines the words
)
#: Any of them (a text it finds nothing in has none of them, on no line).
_ANY_PHRASE = re.compile("|".join(f"(?:{p})" for p in FORBIDDEN_PHRASES), re.IGNORECASE)


#: The words the API, the columns and the settings are checked for.
_WORDS = {"attempt", "attempts", "node", "nodes", "send", "sends"}


def _names(tree: ast.AST) -> Iterator[str]:
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield n.name
        elif isinstance(n, ast.arg | ast.keyword) and n.arg:
            yield n.arg
        elif isinstance(n, ast.alias):
            yield (n.asname or n.name).rsplit(".", 1)[-1]


@cache
def _source(path: Path) -> str:
    """``path``'s text, read once for the module's tests."""
    return path.read_text()


@cache
def _identifier_text(path: Path) -> str:
    """``path``'s text as the parser reads its identifiers (NFKC-normalised): every name
    :func:`_names` finds in ``path`` is a piece of it, so a file whose text lacks a word
    has no name that says it (and need not be parsed to know)."""
    text = _source(path)
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def _may_say(path: Path, word: str) -> bool:
    """Whether a name of ``path`` may contain ``word`` (lower case), by its text."""
    return word in _identifier_text(path).lower()


@cache
def _parsed(path: Path) -> tuple[frozenset[str], tuple[int, ...]]:
    """``path``'s identifiers (:func:`_names`) and the lines of its plan steps named node
    (:func:`steps_named_node`), from one parse. The tree is not kept: a few hundred
    thousand nodes held for the session would make every full garbage collection of the
    tests after these several times slower."""
    tree = ast.parse(_source(path))
    return frozenset(_names(tree)), tuple(steps_named_node(tree))


def _names_in(path: Path) -> frozenset[str]:
    """Every identifier of ``path`` (see :func:`_names`), found once."""
    return _parsed(path)[0]


def _python(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.py"))


def names_saying(word: str, roots: tuple[str, ...] = SOURCES) -> dict[str, set[str]]:
    """Every identifier under ``roots`` that contains ``word``, by module path."""
    found: dict[str, set[str]] = {}
    for path in _python(*roots):
        if not _may_say(path, word):
            continue
        hits = {n for n in _names_in(path) if word in n.lower()}
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    return found


def misuses(found: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """``module: name`` for each name not allowed there, and for each allowed name gone."""
    extra = [f"{m}: {n}" for m, ns in found.items() for n in ns - allowed.get(m, set())]
    gone = [
        f"{m}: {n} (listed, no longer used)"
        for m, ns in allowed.items()
        for n in ns - found.get(m, set())
    ]
    return sorted(extra + gone)


def test_attempt_names_only_where_a_poll_attempt_is_meant() -> None:
    assert misuses(names_saying("attempt"), ATTEMPT_NAMES) == []


def plan_nodes(found: dict[str, set[str]]) -> list[str]:
    """``module: name`` for each name that says "node" for a plan's step."""
    return sorted(
        f"{m}: {n}"
        for m, names in found.items()
        for n in names
        if PLAN_NODE_NAME.search(n) or (m.startswith(PLAN_MODULES) and n != "node_id")
    )


def test_node_names_only_where_a_process_is_meant() -> None:
    assert plan_nodes(names_saying("node")) == []


def steps_named_node(tree: ast.AST) -> list[int]:
    """Lines where a plan's step is bound to a name that says "node"
    (``for node in plan.steps``, ``node = plan.steps[i]``)."""

    def is_steps(value: ast.expr) -> bool:
        if isinstance(value, ast.Subscript):
            value = value.value
        return isinstance(value, ast.Attribute) and value.attr == "steps"

    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.For | ast.comprehension) and is_steps(n.iter):
            targets = [n.target]
        elif isinstance(n, ast.Assign | ast.NamedExpr) and is_steps(n.value):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
        else:
            continue
        for t in targets:
            if any(isinstance(x, ast.Name) and "node" in x.id.lower() for x in ast.walk(t)):
                lines.append(getattr(n, "lineno", getattr(t, "lineno", 0)))
    return lines


def test_a_plan_step_is_never_called_node() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): list(lines)
        for path in _python(*SOURCES)
        if "steps" in _identifier_text(path) and _may_say(path, "node")
        if (lines := _parsed(path)[1])
    }
    assert found == {}


def test_retired_names_are_gone_from_code_tests_and_benchmarks() -> None:
    used = {
        f"{path.relative_to(ROOT).as_posix()}: {name}"
        for path in _python(*SOURCES, "tests", "bench")
        if path.name != "test_vocabulary.py"
        and any(retired in _identifier_text(path) for retired in RETIRED_NAMES)
        for name in _names_in(path) & RETIRED_NAMES
    }
    assert sorted(used) == []


def test_api_fields_say_attempt_for_polls_and_node_for_the_process() -> None:
    schemas = json.loads((ROOT / "docs" / "openapi.json").read_text())["components"]["schemas"]
    fields = {
        f"{schema}.{field}"
        for schema, body in schemas.items()
        for field in body.get("properties", {})
        if _WORDS & {w.lower() for w in re.findall(r"[a-z]+|[A-Z][a-z]*", field)}
    }
    assert fields == {
        "AttemptView.attempt",  # the poll attempt's number (its scope)
        "Health.node",  # the answering node's id
        "NodeList.nodes",  # the node processes' liveness rows
        "InstanceSummaryView.attempt",  # the poll attempt a listed instance waits to run
        "InstanceView.attempts",  # the poll's attempts, each with its tries
        "WaitingView.attempt",  # the poll attempt a parked instance waits to run
    }


def test_columns_and_settings_never_say_attempt_and_node_only_for_the_process() -> None:
    columns = {
        f"{table.name}.{column.name}"
        for table in metadata.tables.values()
        for column in table.columns
        if _WORDS & set(column.name.split("_"))
    }
    # the try in flight is try_*; "node" only in flow_node, the node processes' liveness rows
    assert {c for c in columns if not c.startswith("flow_node.")} == set()
    settings = {f for f in Settings.model_fields if _WORDS & set(f.split("_"))}
    assert settings == {"node_id"}


def _texts() -> Iterator[tuple[str, str]]:
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        yield path.relative_to(ROOT).as_posix(), path.read_text()
    for path in sorted((ROOT / "flowpark" / "ui" / "templates").glob("*.html")):
        yield path.relative_to(ROOT).as_posix(), path.read_text()
    for path in _python(*SOURCES):
        yield path.relative_to(ROOT).as_posix(), _python_prose(_source(path))


def _python_prose(source: str) -> str:
    """What a module says in words (:func:`_prose`); nothing when its text holds no
    phrase (then its strings and comments hold none either)."""
    return _prose(source) if _ANY_PHRASE.search(source) else ""


def _prose(source: str) -> str:
    """The strings and comments of a Python module, each on its own line numbers.

    Each piece is a copy of the module's text; two on one line are joined by a space after
    the first one's closing quote (a comment ends its line). No phrase holds a quote before
    a space, so a phrase found here is one of the module's text: a module whose text holds
    no phrase is not tokenized.
    """
    lines = [""] * (source.count("\n") + 1)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.STRING, tokenize.COMMENT):
            for offset, text in enumerate(token.string.splitlines()):
                lines[token.start[0] - 1 + offset] += " " + text
    return "\n".join(lines)


def forbidden_phrases(texts: Iterator[tuple[str, str]]) -> list[str]:
    """``file:line: phrase`` for every forbidden phrase in ``texts``."""
    hits = []
    for name, text in texts:
        if not _ANY_PHRASE.search(text):  # no phrase crosses a line: none on any line
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in FORBIDDEN_PHRASES:
                for m in re.finditer(pattern, line, re.IGNORECASE):
                    hits.append(f"{name}:{number}: {m.group(0)}")
    return hits


def test_docs_docstrings_and_console_text_use_one_word_for_one_thing() -> None:
    assert forbidden_phrases(_texts()) == []


def test_every_path_the_lists_name_exists() -> None:
    """A module renamed or moved takes its entry along: a list naming a path that is gone
    checks nothing for it (and the module under its new name goes unchecked)."""
    listed = [*ATTEMPT_NAMES, *PLAN_MODULES]
    assert [path for path in listed if not (ROOT / path).exists()] == []


#: The console's pages about a plan and an instance's way through it.
PLAN_PAGES = ("_graph.html", "_timeline.html", "flow.html", "instance.html")


def test_console_text_says_node_only_for_the_process() -> None:
    """On the pages about a plan its entries are steps; "node" is this (or a) node."""
    hits = []
    for path in [ROOT / "flowpark" / "ui" / "templates" / name for name in PLAN_PAGES]:
        # the words a person reads: no tags, no template code
        text = re.sub(r"<[^>]+>|\{%.*?%\}|\{\{.*?\}\}|\{#.*?#\}", " ", path.read_text(), flags=re.S)
        for m in re.finditer(r"(\w+)\W+nodes?\b", text, re.IGNORECASE):
            if m.group(1).lower() not in {"this", "a", "every", "another", "other"}:
                hits.append(f"{path.name}: {m.group(0)}")
    assert hits == []


def test_the_checks_catch_a_planted_misuse() -> None:
    """Each check fails on a misuse of the kind it guards against."""
    planted = ast.parse("class StepContext:\n    def attempt(self) -> int: ...\n")
    found = names_saying("attempt")
    found.setdefault("flowpark/flows/capability.py", set()).update(
        n for n in _names(planted) if "attempt" in n
    )
    assert misuses(found, ATTEMPT_NAMES) == ["flowpark/flows/capability.py: attempt"]
    planted = ast.parse("for node in plan.steps: pass\nclass PollNode: ...\n")
    found = names_saying("node")
    found.setdefault("flowpark/engine/decide/steps.py", set()).add("node")
    found.setdefault("flowpark/store/read_model.py", set()).add("PollNode")
    assert plan_nodes(found) == [
        "flowpark/engine/decide/steps.py: node",
        "flowpark/store/read_model.py: PollNode",
    ]
    assert steps_named_node(ast.parse("node = plan.steps[2]\nfor n in plan.steps: pass\n")) == [1]
    text = [("docs/x.md", "the poll node commits nothing; RetryPolicy(maximum_attempts=3)")]
    assert forbidden_phrases(iter(text)) == [
        "docs/x.md:1: poll node",
        "docs/x.md:1: maximum_attempts",
    ]
    module = 'def f() -> None:\n    """Walk the poll\'s nodes."""\n    g("x", "y")  # at node 3\n'
    assert forbidden_phrases(iter([("app/x.py", _python_prose(module))])) == [
        "app/x.py:2: poll's nodes",
        "app/x.py:3: at node 3",
    ]


#: The words before "node" that make it the process in a command's help: "a node", "every
#: node", "the node's base URL" ... (a finding's "flow, node" meant its step).
_PROCESS_NODE = {
    "a",
    "another",
    "each",
    "every",
    "no",
    "one",
    "other",
    "several",
    "sweeping",
    "the",
    "this",
    "whichever",
}


def _helps() -> Iterator[tuple[str, str]]:
    """``(command, --help text)`` of every ``flowpark`` command and group."""
    import typer
    from typer.testing import CliRunner

    from flowpark.cli.main import app

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    runner = CliRunner()
    for path in walk(typer.main.get_command(app), ()):
        done = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
        assert done.exit_code == 0, (path, done.output)
        yield " ".join(("flowpark", *path)), done.output


def help_misuses(helps: Iterator[tuple[str, str]]) -> list[str]:
    """``command: words`` for each "node" a help text uses for anything but the process
    (and each forbidden phrase it says)."""
    hits = []
    for command, text in helps:
        words = re.sub(r"[│╭╮╰╯─]+", " ", text)  # rich's boxes
        # the word before on its line ("flow, node"); after "flowpark" (or the test
        # runner's "root") it is the command's name
        for m in re.finditer(r"(\w+)[ ,]+nodes?\b", words, re.IGNORECASE):
            if m.group(1).lower() not in _PROCESS_NODE | {"flowpark", "root"}:
                hits.append(f"{command}: {m.group(0)}")
        hits += [f"{command}: {hit}" for hit in forbidden_phrases(iter([(command, words)]))]
    return hits


def test_command_help_says_node_only_for_the_process() -> None:
    helps = list(_helps())
    assert len(helps) > 15  # every command was rendered
    assert help_misuses(iter(helps)) == []
    # serve's help before it named the step of a definition finding
    planted = [("flowpark serve", "one line per finding: severity, rule code, flow, node);")]
    assert help_misuses(iter(planted)) == ["flowpark serve: flow, node"]
