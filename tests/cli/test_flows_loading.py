"""Loading flows (``--flows``, ``FLOWPARK_FLOWS``): module paths, ``.py`` files and folders,
sibling imports, the ``flows(deps)`` factory, and the one-line refusals of serve, worker and
``flows check`` (rule codes, distinct exit codes, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowpark.cli.main import EXIT_FLOWS_INVALID, EXIT_FLOWS_UNLOADABLE
from flowpark.errors import DefinitionError, FlowsUnloadable
from flowpark.flows import Catalog
from flowpark.runtime.http import outbound_client
from flowpark.runtime.loading import Deps, load_flows, register_flows
from flowpark.settings import Settings
from tests.support.server import flowpark_command

PROVIDER = '''
"""A sibling module the flows module imports."""

GREETING = "hello"
'''

GREET = """
from pydantic import BaseModel

from flowpark.flows import Capability, Flow, HttpTrigger, StepContext
from provider import GREETING


class Name(BaseModel):
    name: str


class Greet(Capability):
    id = "greet.say"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        return None


def flows(deps):
    SEEN.append(deps)
    return [
        Flow("greet", "1.0.0", input=Name, trigger=HttpTrigger("POST", "/api/v1/greetings"))
        .step(Greet())
    ]


SEEN = []
"""

BROKEN = """
from pydantic import BaseModel

from flowpark.flows import Backoff, Capability, Flow, StepContext


class In(BaseModel):
    x: int = 0


class Done(BaseModel):
    ok: bool = False


class NotIdempotent(Capability):
    id = "broken.check"
    puts = (Done,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Done(ok=True))


FLOW = Flow("broken.flow", "1.0.0", input=In).poll_until(
    NotIdempotent(),
    until=lambda bag: bag.get(Done).ok,
    interval=Backoff.fixed("PT5S"),
    timeout="PT1M",
)
"""


@pytest.fixture(autouse=True)
def _forget_loaded_modules() -> Iterator[None]:
    """Each test imports its own ``greet``/``provider``: drop them (and their folders on
    ``sys.path``) afterwards."""
    modules, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def _folder(tmp_path: Path, name: str = "own") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "provider.py").write_text(PROVIDER)
    (folder / "greet.py").write_text(GREET)
    (folder / "test_greet.py").write_text("raise RuntimeError('tests are not flows')\n")
    return folder


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    child["FLOWPARK_DATABASE_URL"] = f"sqlite:///{cwd}/never-created.db"
    child.update(env)
    return subprocess.run(
        [*flowpark_command(), *args], env=child, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _deps() -> Deps:
    return Deps(outbound_client(1.0), Settings())


def test_a_folder_loads_with_its_sibling_imports_and_skips_test_files(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "own_folder")
    deps = _deps()
    flows = load_flows([str(folder)], deps)
    assert [(f.name, f.version) for f in flows] == [("greet", "1.0.0")]
    import greet  # loaded as a top-level module

    (seen,) = greet.SEEN  # flows(deps) was called once, with the node's client and settings
    assert seen is deps and seen.http is deps.http and not deps.serving


def test_a_module_path_wins_over_a_folder_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "samples").mkdir()  # a folder named like the package, in the working directory
    (tmp_path / "samples" / "other.py").write_text("raise RuntimeError('not this one')\n")
    monkeypatch.chdir(tmp_path)
    assert len(load_flows(["samples"], _deps())) == 2


def test_a_module_path_and_a_file_load_too(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "own_file")
    assert [f.name for f in load_flows([str(folder / "greet.py")], _deps())] == ["greet"]
    flows = load_flows(["samples"], _deps())
    assert sorted(f.name for f in flows) == ["document.process", "job.await"]


def test_definition_errors_name_flow_node_and_rule_and_register_nothing(tmp_path: Path) -> None:
    (tmp_path / "broken_here.py").write_text(BROKEN)
    catalog = Catalog()
    flows = load_flows(["samples", str(tmp_path / "broken_here.py")], _deps())
    with pytest.raises(DefinitionError) as raised:
        register_flows(catalog, flows)
    assert [f.code for f in raised.value.findings] == ["poll.body_not_idempotent"]
    assert raised.value.findings[0].flow == "broken.flow@1.0.0"
    assert catalog.plans() == []  # all or nothing: the valid samples were not registered


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("missing_module", "no module, .py file or folder of that name"),
        ("./nowhere.py", "no such .py file or folder"),
        ("json", "it defines no flow"),
    ],
)
def test_an_unloadable_target_says_why(target: str, why: str) -> None:
    with pytest.raises(FlowsUnloadable) as raised:
        load_flows([target], _deps())
    assert raised.value.code == "flows_unloadable"
    assert why in raised.value.message and "\n" not in raised.value.message


def test_a_flows_function_that_raises_is_named_by_its_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "several"
    folder.mkdir()
    (folder / "a_fine.py").write_text("import json\n")
    (folder / "b_broken.py").write_text("def flows(deps):\n    raise RuntimeError('boom')\n")
    with pytest.raises(FlowsUnloadable) as raised:
        load_flows([str(folder)], _deps())
    message = raised.value.message
    assert message.startswith(f"cannot load {folder}: RuntimeError: boom (at "), message
    assert message.endswith(f"{folder / 'b_broken.py'}:2)"), message


def test_a_module_that_imports_a_missing_module_names_that_module(tmp_path: Path) -> None:
    (tmp_path / "needs_more.py").write_text("import not_installed_anywhere\n")
    with pytest.raises(FlowsUnloadable) as raised:
        load_flows([str(tmp_path / "needs_more.py")], _deps())
    assert "No module named 'not_installed_anywhere'" in raised.value.message
    assert f"(at {tmp_path / 'needs_more.py'}:1)" in raised.value.message


@pytest.mark.parametrize("command", [["serve", "--port", "9"], ["worker"]], ids=lambda c: c[0])
def test_serve_and_worker_refuse_a_definition_error_with_its_rule_code(
    command: list[str], tmp_path: Path
) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    done = _run([*command, "--flows", "broken.py"], tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_FLOWS_INVALID, output
    assert "Traceback" not in output
    assert done.stderr.strip().splitlines() == [
        "error: poll.body_not_idempotent: broken.flow@1.0.0 [0 poll broken.check]: "
        "broken.check repeats after every success; declare it idempotent"
    ]
    assert not (tmp_path / "never-created.db").exists()


def test_serve_refuses_a_missing_module_in_one_line(tmp_path: Path) -> None:
    done = _run(["serve", "--port", "9", "--flows", "missing_module"], tmp_path)
    assert done.returncode == EXIT_FLOWS_UNLOADABLE, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: flows_unloadable: cannot load missing_module: no module, .py file or "
        "folder of that name"
    ]


def test_flowpark_flows_setting_is_read_and_a_syntax_error_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "typo.py").write_text("def flows(:\n    pass\n")
    done = _run(["serve", "--port", "9"], tmp_path, FLOWPARK_FLOWS=f"samples,{tmp_path}/typo.py")
    assert done.returncode == EXIT_FLOWS_UNLOADABLE, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: flows_unloadable: cannot load ")
    assert "SyntaxError" in lines[0] and "typo.py" in lines[0]


def test_flows_check_takes_a_folder_named_bare_with_sibling_imports(tmp_path: Path) -> None:
    _folder(tmp_path)  # ./own: not a module, so the folder of that name
    done = _run(["flows", "check", "--flows", "own"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == ["ok: greet@1.0.0"]


OWN_APP_FLOWS = """
from pydantic import BaseModel

from app.clients import GREETING
from flowpark import Capability, Flow, HttpTrigger, StepContext

from .clients import GREETING as SAME


class Name(BaseModel):
    name: str


class Greet(Capability):
    id = "greet.say"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        return None


assert GREETING is SAME
FLOW = Flow("greet", "1.0.0", input=Name, trigger=HttpTrigger("POST", "/api/v1/greetings")).step(
    Greet()
)
"""


@pytest.mark.parametrize("target", ["app.flows", "app/flows.py", "./app"])
def test_a_project_of_its_own_app_package_loads_from_its_folder(
    tmp_path: Path, target: str
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "clients.py").write_text('GREETING = "hello"\n')
    (app / "flows.py").write_text(OWN_APP_FLOWS)
    done = _run(["flows", "check", "--flows", target], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == ["ok: greet@1.0.0"]


def test_the_node_settings_hold_no_sample_setting() -> None:
    fields = set(Settings.model_fields)
    assert "flows" in fields
    assert not {f for f in fields if "sample" in f or "ocr" in f or f.startswith("job")}


def test_a_flows_module_reads_its_own_settings_without_the_node_knowing_them() -> None:
    source = textwrap.dedent(
        """
        from flowpark.samples.settings import SampleSettings
        assert SampleSettings(sample_ocr_per_page=1).sample_ocr_per_page == 1
        """
    )
    exec(compile(source, "<sample settings>", "exec"), {})


def _team_project(tmp_path: Path) -> Path:
    """A team's project: its package ``shopapp`` beside a ``team_flows`` folder whose
    module imports it (``from shopapp.clients import GREETING``). (Not ``flows``: a module
    of that name on the test run's path, ``tests/engine/flows.py``, would be found first.)"""
    project = tmp_path / "project"
    (project / "shopapp").mkdir(parents=True)
    (project / "shopapp" / "__init__.py").write_text("")
    (project / "shopapp" / "clients.py").write_text(PROVIDER)
    (project / "team_flows").mkdir()
    (project / "team_flows" / "greet.py").write_text(
        GREET.replace("from provider import", "from shopapp.clients import")
    )
    return project


def test_a_flows_file_importing_the_package_beside_it_names_the_folder_to_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _team_project(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the project: its folder is on no import path
    with pytest.raises(FlowsUnloadable) as raised:
        load_flows([str(project / "team_flows")], _deps())
    message = raised.value.message
    assert "No module named 'shopapp'" in message, message
    assert f"hint: shopapp is in {project}, which is not on the import path" in message
    assert f"PYTHONPATH={project}" in message and "\n" not in message
    # as the hint says: with the project's folder on the path, the flows load (the folder
    # is then a namespace package too: it is still loaded as the folder of flows)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    assert [f.name for f in load_flows(["team_flows"], _deps())] == ["greet"]


def test_serve_says_where_the_missing_package_is_in_one_line(tmp_path: Path) -> None:
    project = _team_project(tmp_path)
    done = _run(["serve", "--port", "9", "--flows", "team_flows"], project)
    assert done.returncode == EXIT_FLOWS_UNLOADABLE, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "No module named 'shopapp'" in line
    assert f"PYTHONPATH={project}" in line


def test_a_module_found_nowhere_gets_the_generic_hint(tmp_path: Path) -> None:
    (tmp_path / "needs_more.py").write_text("import not_installed_anywhere\n")
    with pytest.raises(FlowsUnloadable) as raised:
        load_flows([str(tmp_path / "needs_more.py")], _deps())
    assert "hint: install not_installed_anywhere, or run from the folder holding" in (
        raised.value.message
    )
