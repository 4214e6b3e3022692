"""Test helpers shared by the API and end-to-end tests (live servers, waiting)."""
