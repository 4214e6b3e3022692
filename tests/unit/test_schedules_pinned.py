"""Backoff and retry schedules pinned by literal values: an edit that changes when a parked
poll wakes or when a failed try is retried changes these numbers (and what instances that
are already parked do), so it must be deliberate."""

from __future__ import annotations

from datetime import timedelta

from flowpark.flows import Backoff, RetryPolicy
from flowpark.samples.document_processing.flow import Waits

SEED = "01a2b3c4-0000-7000-8000-000000000001"


def seconds(values: list[timedelta]) -> list[float]:
    return [v.total_seconds() for v in values]


def test_the_sample_poll_schedule_doubles_from_5_s_to_5_min() -> None:
    bases = [Waits.OCR_POLLING.base_delay(n) for n in range(9)]
    assert seconds(bases) == [5, 10, 20, 40, 80, 160, 300, 300, 300]


def test_one_instance_jittered_waits_are_these_values_on_every_node() -> None:
    waits = [Waits.OCR_POLLING.delay(n, SEED) for n in range(8)]
    assert seconds(waits) == [
        3.473116,
        9.435823,
        10.776951,
        22.963577,
        69.463433,
        125.238332,
        166.506912,
        295.326899,
    ]


def test_fixed_and_plain_exponential_schedules() -> None:
    assert seconds([Backoff.fixed("PT2S").delay(n, SEED) for n in range(3)]) == [2, 2, 2]
    expo = Backoff.exponential("PT1M", "PT30M")
    assert seconds([expo.delay(n, SEED) for n in range(7)]) == [
        60,
        120,
        240,
        480,
        960,
        1800,
        1800,
    ]


def test_retry_waits_double_from_the_initial_interval_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0)
    assert seconds([policy.delay_after(n) for n in range(1, 10)]) == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        100,
        100,
    ]


def test_a_retry_policy_takes_iso_durations_as_a_flows_other_durations() -> None:
    policy = RetryPolicy(initial_interval="PT2S", maximum_interval="PT1M", total_duration="PT2M")  # type: ignore[arg-type]
    assert policy.initial_interval == timedelta(seconds=2)
    assert policy.maximum_interval == timedelta(minutes=1)
    assert policy.total_duration == timedelta(minutes=2)
    assert policy.delay_after(2) == timedelta(seconds=4)
    for bad in ("2 minutes", "-PT1S", 120):
        try:
            RetryPolicy(total_duration=bad)  # type: ignore[arg-type]
        except ValueError as exc:
            assert "RetryPolicy.total_duration" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was taken")
