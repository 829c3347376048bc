"""The fabric schedule: every pair exactly once per direction, no endpoint twice in a round,
the round counts of the circle method, k-batch, one-to-all, pairs files and their errors."""

import pytest

from netbench.errors import UsageError
from netbench.sweep import schedule


def _names(n):
    return [f"h{i}" for i in range(n)]


def _check_disjoint(s):
    for r in s.rounds:
        flat = [int(x) for x in r.ravel()]
        assert len(flat) == len(set(flat)), r


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 16, 33])
def test_all_pairs_each_pair_once_in_the_fewest_rounds(n):
    one = schedule.build(_names(n), direction="forward")
    _check_disjoint(one)
    pairs = [frozenset(map(int, p)) for r in one.rounds for p in r]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
    assert len(one.rounds) == (n - 1 if n % 2 == 0 else n)
    assert one.concurrency() == n // 2
    each = schedule.build(_names(n), direction="each")
    _check_disjoint(each)
    ordered = [tuple(map(int, p)) for r in each.rounds for p in r]
    assert len(ordered) == len(set(ordered)) == n * (n - 1)     # both directions, once each
    assert len(each.rounds) == 2 * len(one.rounds)
    # Roles stay balanced: nobody is the client in every round.
    clients = [int(p[0]) for r in one.rounds for p in r]
    assert max(clients.count(i) for i in range(n)) <= (n + 1) // 2 + 1


def test_k_batch_caps_concurrency_and_keeps_every_pair():
    s = schedule.build(_names(10), direction="forward", k=2)
    assert s.concurrency() == 2
    assert s.pairs == 45 and len(s.rounds) == 9 * 3          # 5 pairs a round -> 2 + 2 + 1
    assert s.wall_seconds(10) == 270
    with pytest.raises(UsageError, match="at least 1"):
        schedule.build(_names(4), k=0)


def test_one_to_all_tests_one_host_against_each_other():
    s = schedule.build(_names(5), pattern="one-to-all", center="h3", direction="each")
    got = sorted(tuple(map(int, p)) for r in s.rounds for p in r)
    assert got == sorted([(3, j) for j in (0, 1, 2, 4)] + [(j, 3) for j in (0, 1, 2, 4)])
    assert s.concurrency() == 1
    with pytest.raises(UsageError, match="--center"):
        schedule.build(_names(5), pattern="one-to-all")
    with pytest.raises(UsageError, match="'h9' is not in the sweep"):
        schedule.build(_names(5), pattern="one-to-all", center="h9")


def test_pairs_file_packs_disjoint_rounds_and_names_bad_lines(tmp_path):
    f = tmp_path / "pairs.txt"
    f.write_text("# rack 1 to rack 2\nh0 h1\nh2 h3\nh0 h2   # a cross pair\n\nh1 h3\n")
    s = schedule.build(_names(4), pattern="pairs", pairs_file=f, direction="forward")
    assert [sorted(tuple(map(int, p)) for p in r) for r in s.rounds] == [
        [(0, 1), (2, 3)], [(0, 2), (1, 3)]]
    f.write_text("h0 h1\nh0 nodeX\n")
    with pytest.raises(UsageError, match=r"pairs.txt:2: unknown endpoint\(s\) nodeX"):
        schedule.build(_names(4), pattern="pairs", pairs_file=f)
    f.write_text("h0 h1 h2\n")
    with pytest.raises(UsageError, match=r"pairs.txt:1: want two endpoint names"):
        schedule.build(_names(4), pattern="pairs", pairs_file=f)
    f.write_text("h1 h1\n")
    with pytest.raises(UsageError, match="paired with itself"):
        schedule.build(_names(4), pattern="pairs", pairs_file=f)
    with pytest.raises(UsageError, match="cannot read pairs file"):
        schedule.build(_names(4), pattern="pairs", pairs_file=tmp_path / "none.txt")


def test_a_world_of_one_is_refused():
    with pytest.raises(UsageError, match="at least two endpoints"):
        schedule.build(["only"])


def test_2048_hosts_schedule_is_complete():
    s = schedule.build(_names(2048))
    assert len(s.rounds) == 2 * 2047 and s.concurrency() == 1024
    assert s.pairs == 2048 * 2047


def test_rails_pair_nic_i_with_nic_i_and_run_side_by_side():
    names = [f"h{h}/mlx5_{r}" for h in range(4) for r in range(2)]
    rails = [n.split("/")[1] for n in names]
    s = schedule.build(names, direction="forward", rails=rails)
    _check_disjoint(s)
    pairs = [tuple(map(int, p)) for r in s.rounds for p in r]
    assert all(rails[a] == rails[b] for a, b in pairs)            # never across rails
    assert len(pairs) == 2 * 6 and len(s.rounds) == 3 and s.concurrency() == 4
    with pytest.raises(UsageError, match="single endpoint"):
        schedule.build(["a/x", "b/x", "c/y"], rails=["x", "x", "y"])
