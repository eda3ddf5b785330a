"""Free loopback ports for the Python tests (tests/edge, tests/recipes, tests/rls, tests/python)."""

import socket


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports: every socket stays bound until all are picked, so the
    kernel cannot hand the same port out twice."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]
