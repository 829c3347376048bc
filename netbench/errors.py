"""Errors that reach the user as one clear line instead of a traceback."""


class NetbenchError(Exception):
    """A user-facing error: bad input, an unreachable peer, an unwritable store.

    The CLI prints ``netbench: error: <message>`` and exits with ``exit_code``.
    """

    exit_code = 1


class UsageError(NetbenchError):
    """The command line, a param or a suite file is wrong (exit 2, like argparse)."""

    exit_code = 2


class PeerError(NetbenchError):
    """The peer could not be reached, misbehaved or vanished."""


class SkipCase(NetbenchError):
    """Raised by a benchmark's run() when this case cannot run here; becomes a skipped row."""
