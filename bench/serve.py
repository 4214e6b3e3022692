"""``python -m bench.serve --port P (--app | --fake-ocr [--pending-reads K]
[--unknown-completed])``: uvicorn on loopback for the benchmarks, on a socket bound with
``IPPROTO_TCP``.

asyncio sets ``TCP_NODELAY`` only on sockets whose protocol is ``IPPROTO_TCP``; uvicorn's
own ``--host/--port`` binding makes a protocol-0 socket, so every keep-alive response
written in two pieces waits for the client's delayed ACK (~40 ms) under Nagle's algorithm.
Binding the socket here keeps that artefact out of the figures.

``--app`` serves ``flowpark.runtime.app:create_app`` (settings from ``FLOWPARK_*``, with
``FLOWPARK_GC_FREEZE`` true unless set, as ``flowpark serve`` runs it);
``--fake-ocr`` serves the fake OCR (see :mod:`bench.fakeocr`). With
``FLOWPARK_BENCH_CPUPROFILE`` set the process samples its CPU (:mod:`bench.cpuprofile`).
"""

from __future__ import annotations

import argparse
import os
import socket

import uvicorn

from bench.compat import name_of


def bound_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--app", action="store_true")
    what.add_argument("--fake-ocr", action="store_true")
    parser.add_argument("--pending-reads", type=int, default=None)
    parser.add_argument("--unknown-completed", action="store_true")
    args = parser.parse_args()
    if os.environ.get("FLOWPARK_BENCH_CPUPROFILE"):  # python -m bench.cpuprofile
        from bench.cpuprofile import install

        install(os.environ["FLOWPARK_BENCH_CPUPROFILE"])
    if args.app:
        create_app = name_of("flowpark.runtime.app", "create_app")

        # as `flowpark serve` runs it (a revision without the setting ignores it)
        os.environ.setdefault("FLOWPARK_GC_FREEZE", "true")

        app = create_app()
    else:
        from bench.fakeocr import CountingOcr

        FakeJobService = name_of("flowpark.samples.fakes", "FakeJobService")
        create_fakes_app = name_of("flowpark.samples.fakes", "create_fakes_app")

        ocr = CountingOcr(args.pending_reads, unknown_completed=args.unknown_completed)
        app = create_fakes_app(ocr, FakeJobService())
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[bound_socket(args.port)])


if __name__ == "__main__":
    main()
