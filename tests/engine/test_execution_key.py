"""The execution key: one per (instance, node, scope, kind), the same on every try."""

from __future__ import annotations

from flowpark.engine.context import execution_key
from flowpark.engine.records import InstanceState, StepKind
from flowpark.flows import StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, poll_flow

ENDED = {InstanceState.COMPLETED, InstanceState.FAILED, InstanceState.CANCELLED}


def _recording(seen: list[tuple[int, int, str]], *outcomes: object) -> Scripted:
    """A stand-in that records ``(scope, try, execution_key)`` per call, then plays the
    next of ``outcomes`` (the last repeats)."""

    def play(ctx: StepContext) -> object:
        seen.append((ctx.scope, ctx.try_number, ctx.execution_key))
        return outcomes[min(len(seen) - 1, len(outcomes) - 1)]

    return Scripted(play)


async def test_tries_share_one_key_and_every_other_execution_has_its_own() -> None:
    checks: list[tuple[int, int, str]] = []
    undos: list[tuple[int, int, str]] = []
    starts: list[tuple[int, int, str]] = []
    subs = {
        "t.start": _recording(starts, Job(job_id="j")),
        # attempt 0: two failed tries then an unfinished answer; later attempts unfinished
        "t.check": _recording(
            checks, RuntimeError("down"), RuntimeError("down"), Status(done=False)
        ),
        "t.undo": _recording(undos, None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }
    async with FlowHarness.open([poll_flow(retry=True)], substitutes=subs) as h:
        inst = (await h.start("t.poll", {"order_id": "o-1"})).instance
        final = await h.wait_until(lambda i: i.state in ENDED, inst.id)
        assert final.state is InstanceState.FAILED  # the budget ran out: escalate, fail
        assert await h.calls(inst.id, "t.undo", StepKind.COMPENSATION) == 1
    by_scope: dict[int, set[str]] = {}
    for scope, _, key in checks:
        by_scope.setdefault(scope, set()).add(key)
    assert [t for s, t, _ in checks if s == 0] == [1, 2, 3]
    assert len(by_scope) >= 2
    assert all(len(keys) == 1 for keys in by_scope.values())  # every try: the same key
    check_keys = {next(iter(keys)) for keys in by_scope.values()}
    assert len(check_keys) == len(by_scope)  # every attempt (scope): its own key
    start_key = starts[0][2]
    undo_key = undos[0][2]
    assert start_key == execution_key(inst.id, 0, 0)
    assert undo_key == execution_key(inst.id, 0, 0, StepKind.COMPENSATION)
    assert len({start_key, undo_key} | check_keys) == 2 + len(check_keys)


def test_the_key_is_a_function_of_instance_node_scope_and_kind_only() -> None:
    key = execution_key("i-1", 2, 3)
    assert key == execution_key("i-1", 2, 3, StepKind.STEP)  # recomputed after a crash
    others = {
        execution_key("i-2", 2, 3),
        execution_key("i-1", 1, 3),
        execution_key("i-1", 2, 4),
        execution_key("i-1", 2, 3, StepKind.COMPENSATION),
    }
    assert key not in others and len(others) == 4
    assert key.isascii() and key.isprintable() and " " not in key
