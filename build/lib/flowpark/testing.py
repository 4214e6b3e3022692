"""Testing flows on a virtual clock: the production engine and journal on a real store.

See :class:`FlowHarness` (open a harness over your flows, start instances, move the clock to
each instant an instance recorded) and :class:`Scripted` (a stand-in capability playing
scripted outcomes).
"""

from app.testing import FlowHarness, Scripted, substitute

__all__ = ["FlowHarness", "Scripted", "substitute"]
