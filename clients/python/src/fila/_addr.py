"""Addresses, TLS settings and a cluster's leader hints (no I/O)."""

from __future__ import annotations

import re
import ssl
from typing import List, Optional, Tuple, Union

TlsArg = Union[None, bool, str, ssl.SSLContext]
DEFAULT_PORT = 7700
_LEADER = re.compile(r"leader (\d+) at (\S+)\s*$")


def parse(addr: str) -> Tuple[List[str], bool]:
    """A comma-separated list of `host:port` (each may start `fila://` or
    `filas://`); answers the nodes and whether a `filas://` asked for TLS."""
    nodes, tls = [], False
    for part in addr.split(","):
        part = part.strip()
        if part.startswith("filas://"):
            tls, part = True, part[len("filas://") :]
        elif part.startswith("fila://"):
            part = part[len("fila://") :]
        part = part.rstrip("/")
        if not part:
            continue
        host, port = split(part)
        nodes.append(f"{host}:{port}")
    if not nodes:
        raise ValueError(f"no address in {addr!r}: host:port, or several separated by commas")
    return nodes, tls


def split(node: str) -> Tuple[str, int]:
    """`host:port` (an IPv6 host in brackets) as host and port."""
    if node.startswith("["):
        host, _, rest = node[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else str(DEFAULT_PORT)
    elif node.count(":") == 1:
        host, port = node.split(":")
    else:
        host, port = node, str(DEFAULT_PORT)
    try:
        n = int(port)
    except ValueError:
        raise ValueError(f"the port of {node!r} is not a number") from None
    if not host or not 0 < n < 65536:
        raise ValueError(f"{node!r} is not host:port")
    return host, n


def context(tls: TlsArg, wanted: bool) -> Optional[ssl.SSLContext]:
    """The TLS context a client uses: `tls` an `ssl.SSLContext` as it is,
    a CA file's path, True (the system's CAs); None or False with a
    `filas://` address also the system's CAs; else no TLS."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if isinstance(tls, str):
        return ssl.create_default_context(cafile=tls)
    if tls is True or (tls is None and wanted):
        return ssl.create_default_context()
    return None


def leader_of(message: str) -> Optional[str]:
    """The leader's address a `not_leader` answer names, if it does."""
    m = _LEADER.search(message)
    return m.group(2) if m else None
