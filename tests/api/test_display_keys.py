"""Display keys: a flow names the input field that names an instance to people; the list
shows it and finds instances by it; the list also finds an instance by the start of its id.
On both stores."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from flowpark.api.models import InstanceList, InstanceView
from flowpark.errors import DefinitionError
from flowpark.flows import Backoff, Capability, Catalog, Flow, HttpTrigger, StepContext
from tests.api.operator_support import operated


class Invoice(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    document_id: str
    pages: int = 1


class Noop(Capability):
    id = "k.noop"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        return None


def keyed_flow(display_key: str = "documentId") -> Flow:
    flow = Flow(
        "k.doc",
        "1.0.0",
        input=Invoice,
        trigger=HttpTrigger("POST", "/api/v1/k-doc"),
        display_key=display_key,
    )
    flow.poll_until(
        Noop(),
        until=lambda bag: False,
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(minutes=10),
    )
    return flow


async def test_the_list_shows_and_finds_instances_by_display_key_and_id_prefix(
    store_url: str,
) -> None:
    async with operated(store_url, [keyed_flow()]) as op:
        ids = {}
        for doc in ("invoice-41", "invoice-42", "receipt-7"):
            ids[doc] = (await op.h.start("k.doc", {"documentId": doc})).instance.id
        async with op.client() as client:
            listed = (await client.get("/api/v1/instances")).json()
            InstanceList.model_validate(listed)
            by_id = {r["instanceId"]: r["displayKey"] for r in listed["instances"]}
            assert by_id == {v: k for k, v in ids.items()}

            found = await client.get("/api/v1/instances", params={"displayKey": "invoice-42"})
            assert [r["instanceId"] for r in found.json()["instances"]] == [ids["invoice-42"]]
            none = await client.get("/api/v1/instances", params={"displayKey": "invoice-4"})
            assert none.json()["instances"] == []  # exact, not a prefix

            view = (await client.get(f"/api/v1/instances/{ids['receipt-7']}")).json()
            InstanceView.model_validate(view)
            assert view["displayKey"] == "receipt-7"

            target = ids["receipt-7"]
            prefix = next(
                target[:n]
                for n in range(8, 37)
                if sum(i.startswith(target[:n]) for i in ids.values()) == 1
            )
            one = await client.get("/api/v1/instances", params={"idPrefix": prefix})
            assert [r["instanceId"] for r in one.json()["instances"]] == [target]
            shared = target[:4]  # uuid7 ids started together share their first characters
            many = await client.get("/api/v1/instances", params={"idPrefix": shared})
            assert len(many.json()["instances"]) == 3
            for bad in ("ab", "XYZW", "0193%", "a" * 40):
                refused = await client.get("/api/v1/instances", params={"idPrefix": bad})
                assert refused.status_code == 422, bad
                assert refused.json()["code"] == "input_invalid"

            # a bulk dry run takes the same display key filter
            bulk = await client.post(
                "/api/v1/instances/actions",
                json={"action": "cancel", "filter": {"displayKey": "invoice-41"}, "dryRun": True},
            )
            assert bulk.status_code == 200, bulk.text
            assert bulk.json()["matched"] == 1


def test_a_display_key_that_is_no_input_field_is_refused_at_registration() -> None:
    with pytest.raises(DefinitionError) as info:
        Catalog().register(keyed_flow("document_ref"))
    codes = [f.code for f in info.value.findings]
    assert codes == ["flow.display_key_unknown"]
    assert "documentId" in str(info.value)
