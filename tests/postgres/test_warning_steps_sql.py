"""The ``on_warning`` capability's bodies (:mod:`tests.engine.test_warning_steps`) on
SQLite and PostgreSQL: the same instants, rows and reviews as on the memory store."""

from __future__ import annotations

from tests.engine import test_warning_steps as ladder


async def test_the_warning_capability_runs_once_and_the_wait_times_out_on_sql(
    store_url: str,
) -> None:
    await ladder.test_the_warning_runs_its_capability_once_and_the_wait_still_times_out(store_url)


async def test_a_failing_warning_capability_retries_on_sql(store_url: str) -> None:
    await ladder.test_a_failing_warning_capability_retries_while_the_wait_goes_on(store_url)


async def test_an_extension_moves_the_warning_capability_on_sql(store_url: str) -> None:
    await ladder.test_an_extension_moves_the_warning_capability_with_the_end(store_url)


async def test_an_await_signals_warning_capability_on_sql(store_url: str) -> None:
    await ladder.test_an_await_signals_warning_capability_runs_then_the_signal_ends_it(store_url)


async def test_an_await_signal_takes_its_signal_during_a_warning_retry_on_sql(
    store_url: str,
) -> None:
    await ladder.test_an_await_signal_takes_its_signal_while_its_warning_capability_waits_to_retry(
        store_url
    )
