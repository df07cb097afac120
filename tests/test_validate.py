"""The one mechanism that checks every ``Settings`` field at construction (``mmtoken.validate.fields``, issue 44).

Each kind of rule refuses each kind of wrong value (type, range, length, items, choice, relation) with an error
naming the class, the field and what it accepts, and stores what it accepts normalised (lists as tuples, NumPy
numbers as Python ones), so that equal settings hash and key alike.
"""

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mmtoken import validate


@dataclass(frozen=True)
class Demo:
    steps: int = 10
    lr: float = 0.1
    flag: bool = False
    name: str = "a"
    mode: str = "global"
    width: float = 0.5
    starts: tuple = ((0.0, 1.0), (1.0, 0.0))
    sizes: tuple = (2, 3)
    size: tuple = (4, 4, 6)
    m: int | None = None
    loss: str = "ok"

    def __post_init__(self):
        validate.fields(
            self,
            {
                "steps": validate.integer(1),
                "lr": validate.real(above=0),
                "mode": validate.choice("global", "local"),
                "width": validate.real(above=0, below=1),
                "starts": validate.points(2),
                "sizes": validate.sequence(validate.integer(1), distinct=True, scalar=True),
                "size": validate.instance_size(),
                "m": validate.optional(validate.integer(1)),
                "loss": validate.satisfies(_known, "a known loss"),
            },
        )
        validate.relation(self, "steps", self.steps >= len(self.starts), f"at least len(starts) ({len(self.starts)})")


def _known(x):
    if x not in ("ok", "fine"):
        raise ValueError(f"unknown loss {x!r}")


def refused(exc, match, **changes):
    with pytest.raises(exc, match=match) as info:
        Demo(**changes)
    return str(info.value)


# --------------------------------------------------------------------------- each kind of rule
@pytest.mark.parametrize("bad", [1.5, 10.0, True, "10", None, np.float64(3.0)])
def test_an_integer_field_takes_integers_only(bad):
    msg = refused(TypeError, r"^Demo\.steps must be an integer >= 1, got", steps=bad)
    assert repr(bad) in msg or str(bad) in msg


@pytest.mark.parametrize("bad", [0, -1])
def test_an_integer_field_refuses_values_out_of_range(bad):
    refused(ValueError, rf"^Demo\.steps must be an integer >= 1, got {bad}$", steps=bad)


@pytest.mark.parametrize("bad", ["0.1", True, None, [0.1], complex(1, 0)])
def test_a_real_field_takes_real_numbers_only(bad):
    refused(TypeError, r"^Demo\.lr must be a finite number > 0", lr=bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_a_real_field_refuses_non_finite_and_out_of_range(bad):
    refused(ValueError, r"^Demo\.lr must be a finite number > 0", lr=bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5])
def test_an_open_interval_refuses_its_ends(bad):
    refused(ValueError, r"^Demo\.width must be a finite number in \(0, 1\)", width=bad)


@pytest.mark.parametrize("bad", ["no", "False", 0, 1, None])
def test_a_boolean_is_true_or_false_not_a_truth_value(bad):
    refused(TypeError, r"^Demo\.flag must be True or False", flag=bad)


def test_strings_and_choices():
    refused(TypeError, r"^Demo\.name must be a string, got 3", name=3)
    refused(ValueError, r"^Demo\.mode must be one of 'global', 'local', got 'globl'", mode="globl")
    refused(ValueError, r"^Demo\.mode must be one of", mode=1)


def test_points_refuse_wrong_lengths_types_and_values():
    refused(ValueError, r"^Demo\.starts must be a non-empty tuple of points of 2 finite numbers, got \(\)", starts=())
    refused(
        ValueError, r"^Demo\.starts\[1\] must be a point of 2 finite numbers, got \(1\.0,\)", starts=((0, 1), (1.0,))
    )
    refused(TypeError, r"^Demo\.starts\[0\] must be a point", starts=(1.0, 2.0))  # a point, not points
    refused(TypeError, r"^Demo\.starts must be", starts="ab")
    refused(TypeError, r"^Demo\.starts must be", starts=3)
    refused(ValueError, r"^Demo\.starts\[0\]\[1\] must be a finite number, got nan", starts=((0.0, math.nan),))
    refused(TypeError, r"^Demo\.starts\[0\]\[0\] must be a finite number, got 'x'", starts=(("x", 1.0),))


def test_sequences_refuse_repeats_bad_items_and_unordered_containers():
    refused(ValueError, r"^Demo\.sizes must be a non-empty tuple of distinct items", sizes=(2, 2))
    refused(ValueError, r"^Demo\.sizes must be a non-empty tuple", sizes=())
    refused(TypeError, r"^Demo\.sizes\[1\] must be an integer >= 1, got 2\.5", sizes=(1, 2.5))
    refused(ValueError, r"^Demo\.sizes\[0\] must be an integer >= 1, got 0", sizes=[0])
    refused(TypeError, r"^Demo\.sizes must be", sizes={1, 2})  # a set has no order
    refused(TypeError, r"^Demo\.sizes must be", sizes={1: 2})


def test_a_tuple_of_positions_checks_each_position():
    refused(
        ValueError, r"^Demo\.size must be a size \(n, T, d\) with n >= 1, T >= 2, d >= 1, got \(4, 4\)", size=(4, 4)
    )
    refused(ValueError, r"^Demo\.size\[1\] must be an integer >= 2, got 1", size=(4, 1, 6))
    refused(TypeError, r"^Demo\.size\[2\] must be an integer >= 1, got 6\.0", size=(4, 4, 6.0))


def test_optional_custom_and_relations():
    assert Demo(m=None).m is None and Demo(m=3).m == 3
    refused(ValueError, r"^Demo\.m must be None or an integer >= 1, got 0", m=0)
    msg = refused(ValueError, r"^Demo\.loss must be a known loss, got 'hinge'", loss="hinge")
    assert "unknown loss 'hinge'" in msg  # the check's own reason follows
    refused(ValueError, r"^Demo\.steps must be at least len\(starts\) \(2\), got 1", steps=1)


# --------------------------------------------------------------------------- what is stored
def test_values_are_normalised_so_equal_settings_hash_and_key_alike():
    s = Demo(
        steps=np.int64(10),
        lr=torch.tensor(0.1, dtype=torch.float64),
        starts=np.array([[0, 1], [1, 0]]),
        sizes=[2, 3],
        size=[4, 4, 6],
        flag=np.bool_(False),
    )
    assert s == Demo() and hash(s) == hash(Demo())
    assert type(s.steps) is int and type(s.lr) is float and type(s.flag) is bool
    assert s.starts == ((0.0, 1.0), (1.0, 0.0)) and type(s.starts[0][0]) is float
    assert Demo(lr=1).lr == 1.0 and type(Demo(lr=1).lr) is float  # an int where a float is asked: stored as float
    assert Demo(sizes=5).sizes == (5,)  # scalar=True: one value is a tuple of one
    assert Demo(starts=((np.cos(a), np.sin(a)) for a in (0.0, 1.0))).starts[1] == (math.cos(1.0), math.sin(1.0))


def test_a_type_error_is_also_a_value_error():
    """Callers that catch every bad value as a ValueError keep working."""
    with pytest.raises(ValueError):
        Demo(steps=1.5)
    assert issubclass(validate.FieldTypeError, TypeError) and issubclass(validate.FieldTypeError, ValueError)


def test_long_values_are_shortened_in_the_message():
    with pytest.raises(ValueError) as info:
        Demo(sizes=tuple(range(1, 200)) + (1,))
    assert len(str(info.value)) < 200 and str(info.value).endswith("...")


# --------------------------------------------------------------------------- the class's own mistakes
def test_a_field_without_a_rule_or_a_rule_without_a_field_is_the_class_mistake():
    @dataclass(frozen=True)
    class NoRule:
        points: tuple = ()

        def __post_init__(self):
            validate.fields(self)

    with pytest.raises(TypeError, match=r"NoRule\.points \(<class 'tuple'>\) needs a rule"):
        NoRule()

    @dataclass(frozen=True)
    class Typo:
        steps: int = 1

        def __post_init__(self):
            validate.fields(self, {"stepz": validate.integer(1)})

    with pytest.raises(TypeError, match="Typo has no field stepz"):
        Typo()


def test_annotations_give_the_default_rules():
    @dataclass(frozen=True)
    class Plain:
        seed: int = 0
        scale: float = 1.0
        on: bool = True
        label: str = "x"

        def __post_init__(self):
            validate.fields(self)

    rules = validate.rules_of(Plain)
    assert [r.describe() for r in rules.values()] == ["an integer >= 0", "a finite number", "True or False", "a string"]
    with pytest.raises(ValueError, match=r"Plain\.seed must be an integer >= 0, got -1"):
        Plain(seed=-1)
    with pytest.raises(ValueError, match=r"Plain\.scale must be a finite number, got inf"):
        Plain(scale=math.inf)


def test_rules_of_a_class_are_the_ones_it_checks():
    rules = validate.rules_of(Demo)
    assert list(rules) == [f for f in Demo.__dataclass_fields__]
    assert rules["steps"] == validate.integer(1) and rules["flag"] == validate.boolean()
    assert rules["width"].describe() == "a finite number in (0, 1)"
    assert validate.real(at_least=0, at_most=1).describe() == "a finite number in [0, 1]"
    assert validate.real(below=1).describe() == "a finite number < 1"
    assert validate.sequence(validate.real(), length=3).describe() == "a tuple of 3 items, each a finite number"
    with pytest.raises(ValueError, match="one lower bound"):
        validate.real(above=0, at_least=1)
