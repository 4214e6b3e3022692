"""The shop: flowpark embedded in a team's own FastAPI service (a sample to copy).

* :mod:`flowpark.samples.shop.app`: the shop's application (``uvicorn
  flowpark.samples.shop.app:app``): its own routes, lifespan and settings, flowpark included
  at ``/flowpark``, and an order and its payment's start written in one transaction.
* :mod:`flowpark.samples.shop.orders`: its own table, ``shop_order``, on its own engine.
* :mod:`flowpark.samples.shop.payments`: the ``payment.await`` flow.
* :mod:`flowpark.samples.shop.fake_provider`: the fake payment provider it calls over HTTP.

It imports flowpark's public names only (``flowpark``, ``flowpark.embedding``,
``flowpark.settings``), as a team's code would. ``flowpark demo --embedded`` runs it.
"""
