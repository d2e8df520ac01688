"""pipeline.beam.engines.free_port: services started one after the other get distinct ports."""

from __future__ import annotations

import socket
from unittest import mock

from pipeline.beam import engines


def test_a_port_is_never_handed_out_twice_even_when_the_kernel_offers_it_again():
    """The kernel offers the same ephemeral port again once its probe is closed (seen: the Spark
    master and the SDK worker pool both got 50559); free_port skips ports it handed out."""
    offered = iter([50559, 50559, 50559, 50560])
    real_socket = socket.socket

    class Probe:
        def __init__(self, *args):
            self._socket = real_socket(*args)
            self._port = next(offered)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._socket.close()

        def bind(self, address):
            pass

        def getsockname(self):
            return ("127.0.0.1", self._port)

    with (
        mock.patch.object(engines, "_HANDED_OUT", set()),
        mock.patch.object(engines.socket, "socket", Probe),
    ):
        first = engines.free_port()
        second = engines.free_port()
    assert (first, second) == (50559, 50560)


def test_many_ports_in_a_row_are_distinct_and_bindable():
    ports = [engines.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[-1]))
