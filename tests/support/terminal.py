"""Reading what a process wrote to a pseudo-terminal."""

from __future__ import annotations

import os


def read_until_closed(leader: int) -> bytes:
    """All a pty's other end wrote, up to its close; closes ``leader``.

    Linux reports the close of the last holder of the follower end as
    ``EIO`` on the leader, not as an empty read.
    """
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks)
