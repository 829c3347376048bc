import pytest

from netbench.api import Benchmark, Metric, Param, format_size, parse_size
from netbench.errors import UsageError


@pytest.mark.parametrize("text,expected", [
    ("512", 512), ("64K", 65536), ("64KiB", 65536), ("64kb", 65536), ("1M", 1 << 20),
    ("2G", 2 << 30), (4096, 4096), ("1.5K", 1536),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "K", "12Q", "-1", "1.3", True, "1 M B"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size_round_trips():
    for n in (1, 100, 1024, 65536, 3 << 20, 1 << 30, 1536):
        assert parse_size(format_size(n)) == n


def test_sweep_size_param_accepts_lists_and_ranges():
    p = Param("msg_size", "size", 64, sweep=True, minimum=1, maximum=8 << 20)
    assert p.parse("1K,64K") == [1024, 65536]
    assert p.parse(["1K", 2048]) == [1024, 2048]
    assert p.parse("2..16") == [2, 4, 8, 16]
    assert p.parse("2..8M")[-1] == 8 << 20 and len(p.parse("2..8M")) == 23
    # nccl-tests -b 1K -e 1M -f 4, and -b 1M -e 4M -i 1M
    assert p.parse("1K..1M:x4") == [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
    assert p.parse("1M..4M:+1M") == [1 << 20, 2 << 20, 3 << 20, 4 << 20]
    for bad, why in (("1K..1M:x1", "factor"), ("1K..1M:+0", "positive"), ("1K..1M:y", "after"),
                     ("1..8M:+1", "more than")):
        with pytest.raises(UsageError, match=why):
            p.parse(bad)


def test_param_errors_name_param_and_accepted_values():
    p = Param("streams", "int", 1, minimum=1, maximum=128)
    with pytest.raises(UsageError, match=r"param streams: bad value 'two'.*an integer"):
        p.parse("two")
    with pytest.raises(UsageError, match="out of range.*<= 128"):
        p.parse("500")
    with pytest.raises(UsageError, match="takes one value"):
        p.parse([1, 2])
    c = Param("direction", "choice", "forward", choices=("forward", "reverse"))
    with pytest.raises(UsageError, match="one of forward, reverse"):
        c.parse("sideways")
    b = Param("validate", "bool", False)
    assert b.parse("yes") is True and b.parse(False) is False
    with pytest.raises(UsageError):
        b.parse("maybe")
    f = Param("duration", "float", 1.0)
    with pytest.raises(UsageError):
        f.parse(True)


def test_metric_direction_is_checked():
    with pytest.raises(ValueError):
        Metric("x", "s", "faster")


class _Toy(Benchmark):
    name = "toy.op"
    transport = "none"
    metrics = (Metric("m", "u", "higher"),)
    params = (Param("msg_size", "size", 8, sweep=True), Param("n", "int", 2, sweep=True),
              Param("mode", "choice", "a", choices=("a", "b")))


def test_expand_is_cartesian_product_in_declared_order():
    cases = _Toy().expand({"msg_size": "1K,2K", "n": "1,2,3"})
    assert [(c.params["msg_size"], c.params["n"]) for c in cases] == [
        (1024, 1), (1024, 2), (1024, 3), (2048, 1), (2048, 2), (2048, 3)]
    assert all(c.params["mode"] == "a" for c in cases)
    assert cases[0].msg_size == 1024
    assert _Toy().family == "toy" and _Toy().op == "op"


def test_unknown_param_lists_known_ones():
    with pytest.raises(UsageError, match="has no param 'size'; its params: msg_size, n, mode"):
        _Toy().expand({"size": 1})


def test_validate_remote_rejects_lists_and_unknown_keys():
    toy = _Toy()
    assert toy.validate_remote({"msg_size": 16, "n": 1})["msg_size"] == 16
    with pytest.raises(UsageError):
        toy.validate_remote({"msg_size": [1, 2]})
    with pytest.raises(UsageError, match="unknown params"):
        toy.validate_remote({"evil": 1})
    with pytest.raises(UsageError):
        toy.validate_remote(["not", "a", "dict"])
