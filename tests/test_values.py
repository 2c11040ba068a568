"""values.Value: the guard path's slotted classes behave like the frozen dataclasses they replace."""

import copy
import dataclasses
import pickle
from typing import ClassVar, Optional

import pytest

from vllm_hotfix_guard.values import Value


class Point(Value):
    """Two fields, one with a default."""

    x: int
    y: Optional[int] = None
    LIMIT: ClassVar[int] = 3  # not a field


class Labelled(Point):
    label: str = ""


@dataclasses.dataclass(frozen=True)
class Twin:
    """The frozen dataclass a Value stands in for."""

    x: int
    y: Optional[int] = None


def test_construction_like_a_frozen_dataclass():
    assert Point(1).y is None and Point(1, 2).y == 2 and Point(x=1, y=2) == Point(1, 2)
    for args, kwargs in (((), {}), ((1, 2, 3), {}), ((1,), {"z": 2}), ((1,), {"x": 1})):
        with pytest.raises(TypeError):
            Point(*args, **kwargs)
        with pytest.raises(TypeError):
            Twin(*args, **kwargs)
    assert Point._fields == ("x", "y") and Point.LIMIT == 3


def test_equality_hash_repr_and_no_assignment():
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1) and hash(Point(1, 2)) == hash(Point(1, 2))
    assert Point(1, 2) != Labelled(1, 2)  # another class: as dataclasses, never equal
    assert repr(Point(1, 2)) == "Point(x=1, y=2)"
    point = Point(1)
    with pytest.raises(AttributeError):
        point.x = 2
    with pytest.raises(AttributeError):
        del point.x
    with pytest.raises(AttributeError):
        point.other = 1  # __slots__: no attribute of another name either
    assert not hasattr(point, "__dict__")


def test_inheritance_copy_pickle_and_as_dict():
    item = Labelled(1, label="a")
    assert Labelled._fields == ("x", "y", "label") and item.y is None
    assert pickle.loads(pickle.dumps(item)) == item and copy.copy(item) == item and copy.deepcopy(item) == item
    assert item.as_dict() == {"x": 1, "y": None, "label": "a"}
    assert Point(1, 2).as_dict() == dataclasses.asdict(Twin(1, 2))
