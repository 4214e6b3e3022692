"""Deciding: pure functions of (plan, instance, journal rows, mailbox, now) that answer
one frozen decision. Nothing here imports a store, the runtime, asyncio or any I/O."""
