"""The deployable application of this repository: ``uvicorn app.main:app``.

Run from the repository (the Dockerfile copies this folder beside the installed
``flowpark`` distribution); never installed. Everything it runs is built by the library.
"""
