"""Which hosts measure against which, and when: the plan of a fabric sweep.

A schedule is a list of rounds; a round is a set of disjoint (client, server) pairs of
endpoint indices that run at the same time, each host in at most one pair, so no NIC is
measured while it also serves another pair. Patterns:

- ``all``: every pair, by the circle method (round-robin tournament): N-1 rounds of N/2 pairs
  for even N; odd N gets a bye, N rounds of (N-1)/2.
- ``one-to-all``: one endpoint (a new or repaired host) against each other, one pair a round.
- a pairs file: the pairs it lists, packed into rounds of disjoint pairs (first fit).

``direction``: ``each`` runs both directions of a pair as separate measurements (the second
half of the rounds swaps client and server), ``forward`` one direction (the client sends to
the server), ``bidirectional`` both at once (the benchmark's own bidirectional mode).
``k`` caps the pairs that run at once (k-batch): each round splits into rounds of at most k.
numpy builds the rounds as arrays, so 2,048 hosts (2 x 2,047 rounds of 1,024 pairs) take a
fraction of a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netbench.errors import UsageError

PATTERNS = ("all", "one-to-all", "pairs")
DIRECTIONS = ("each", "forward", "bidirectional")


@dataclass
class Schedule:
    """``rounds[r]`` is an int array of shape (pairs, 2): client and server endpoint indices."""

    endpoints: list[str]
    rounds: list[Any]
    pattern: str
    direction: str

    @property
    def pairs(self) -> int:
        return sum(len(r) for r in self.rounds)

    def concurrency(self) -> int:
        return max((len(r) for r in self.rounds), default=0)

    def wall_seconds(self, per_pair: float) -> float:
        """Time of the sweep when each pair measurement takes ``per_pair`` seconds."""
        return len(self.rounds) * per_pair


def _circle(n: int) -> Any:
    """Rounds x pairs x 2 for an even ``n``: endpoint 0 stays, the others rotate."""
    import numpy as np

    m = n - 1
    rot = (np.arange(m)[:, None] + np.arange(m)[None, :]) % m + 1      # (rounds, n - 1)
    seats = np.concatenate([np.zeros((m, 1), dtype=rot.dtype), rot], axis=1)
    half = n // 2
    first, second = seats[:, :half], seats[:, ::-1][:, :half]
    pairs = np.stack([first, second], axis=2)
    # Endpoint 0 would be the client in every round: alternate it, so roles stay balanced.
    flip = np.arange(m) % 2 == 1
    pairs[flip, 0, :] = pairs[flip, 0, ::-1]
    return pairs


def all_pairs(n: int) -> list[Any]:
    """Every unordered pair once, in rounds of disjoint pairs."""
    import numpy as np

    if n % 2 == 0:
        return list(_circle(n))
    rounds = []
    for r in _circle(n + 1):                 # endpoint n is the bye
        rounds.append(r[(r != n).all(axis=1)])
    return [np.asarray(r) for r in rounds]


def one_to_all(n: int, center: int) -> list[Any]:
    import numpy as np

    return [np.array([[center, j]]) for j in range(n) if j != center]


def pack(pairs: Sequence[tuple[int, int]]) -> list[Any]:
    """Listed pairs into rounds where no endpoint appears twice (first fit, in file order)."""
    import numpy as np

    rounds: list[list[tuple[int, int]]] = []
    busy: list[set[int]] = []
    for a, b in pairs:
        for r, used in enumerate(busy):
            if a not in used and b not in used:
                rounds[r].append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return [np.array(r) for r in rounds]


def read_pairs(path: str | Path, endpoints: Sequence[str]) -> list[tuple[int, int]]:
    """A pairs file: one ``CLIENT SERVER`` per line (names as the sweep's endpoints are
    named), ``#`` comments. Unknown names, self-pairs and malformed lines are errors that
    name the line."""
    index = {name: i for i, name in enumerate(endpoints)}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read pairs file {path}: {exc.strerror or exc}") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise UsageError(f"{path}:{number}: want two endpoint names (CLIENT SERVER), got "
                             f"{line.strip()!r}")
        unknown = [w for w in words if w not in index]
        if unknown:
            raise UsageError(f"{path}:{number}: unknown endpoint(s) {', '.join(unknown)}; the "
                             f"sweep has {', '.join(endpoints[:20])}"
                             f"{' ...' if len(endpoints) > 20 else ''}")
        if words[0] == words[1]:
            raise UsageError(f"{path}:{number}: {words[0]} paired with itself")
        pairs.append((index[words[0]], index[words[1]]))
    if not pairs:
        raise UsageError(f"pairs file {path} lists no pairs")
    return pairs


def build(endpoints: Sequence[str], pattern: str = "all", direction: str = "each",
          k: int | None = None, center: str | None = None,
          pairs_file: str | Path | None = None, rails: Sequence[str] | None = None
          ) -> Schedule:
    """The sweep's rounds for these endpoints (every rank computes the same schedule).
    ``rails``: each endpoint's rail (its NIC's position on a multi-NIC host): pairs stay on
    one rail, NIC i with NIC i, and the rails' rounds run side by side."""
    import numpy as np

    if rails is not None:
        return _by_rail(endpoints, rails, pattern, direction, k, center, pairs_file)
    n = len(endpoints)
    if n < 2:
        raise UsageError(f"a fabric sweep needs at least two endpoints; the world has {n} "
                         "(start one netbench per host under srun, mpirun or torchrun)")
    if pattern not in PATTERNS:
        raise UsageError(f"pattern {pattern!r}: one of {', '.join(PATTERNS)}")
    if direction not in DIRECTIONS:
        raise UsageError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    if k is not None and k < 1:
        raise UsageError(f"k {k}: at least 1 pair at a time")
    if pattern == "all":
        rounds = all_pairs(n)
    elif pattern == "one-to-all":
        if center is None:
            raise UsageError("one-to-all needs the endpoint to test (--center HOST)")
        if center not in endpoints:
            raise UsageError(f"--center {center!r} is not in the sweep; it has "
                             f"{', '.join(list(endpoints)[:20])}")
        rounds = one_to_all(n, list(endpoints).index(center))
    else:
        if pairs_file is None:
            raise UsageError("pattern pairs needs a pairs file (--pairs FILE)")
        rounds = pack(read_pairs(pairs_file, endpoints))
    if direction == "each":
        rounds = rounds + [r[:, ::-1] for r in rounds]
    if k is not None:
        rounds = [r[i:i + k] for r in rounds for i in range(0, len(r), k)]
    return Schedule(list(endpoints), [np.ascontiguousarray(r) for r in rounds], pattern,
                    direction)


def _by_rail(endpoints: Sequence[str], rails: Sequence[str], pattern: str, direction: str,
             k: int | None, center: str | None, pairs_file: str | Path | None) -> Schedule:
    import numpy as np

    if pattern == "pairs":
        raise UsageError("a pairs file names its pairs itself: leave out --rails")
    groups: dict[str, list[int]] = {}
    for i, rail in enumerate(rails):
        groups.setdefault(rail, []).append(i)
    lonely = [r for r, members in groups.items() if len(members) < 2]
    if lonely:
        raise UsageError(f"rail(s) {', '.join(map(repr, lonely))} have a single endpoint: "
                         "rail-to-rail pairs need each rail on at least two hosts")
    per_rail = []
    for members in groups.values():
        names = [endpoints[i] for i in members]
        if pattern == "one-to-all" and center not in names:
            continue
        local = build(names, pattern, direction, None, center, None)
        index = np.asarray(members)
        per_rail.append([index[r] for r in local.rounds])
    if not per_rail:
        raise UsageError(f"--center {center!r} is not in the sweep")
    rounds = []
    for r in range(max(len(x) for x in per_rail)):
        parts = [x[r] for x in per_rail if r < len(x)]
        rounds.append(np.concatenate(parts, axis=0))
    if k is not None:
        if k < 1:
            raise UsageError(f"k {k}: at least 1 pair at a time")
        rounds = [r[i:i + k] for r in rounds for i in range(0, len(r), k)]
    return Schedule(list(endpoints), rounds, pattern, direction)
