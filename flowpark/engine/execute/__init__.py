"""Carrying out: one decision at a time for one run (a try under its limits, one fenced
write per outcome), until the instance parks or ends."""
