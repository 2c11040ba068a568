"""Small frozen value classes for the code the in-process guard runs, without dataclass's import cost.

``@dataclass`` writes and compiles ``__init__``, ``__repr__``, ``__eq__`` (and ``__setattr__`` when
frozen) for every class when its module is imported: about 0.5 ms a class, measured inside the real
vLLM process, and the guard's path (its verdict, the lock reader, core.verdict, the fingerprint, the
target folder) holds ten of them -- most of the guard's budget in every vLLM process. A ``Value`` is
declared like a frozen dataclass (annotated fields, defaults) and behaves like one where this code
relies on it: positional or keyword construction with defaults, equality and hash over the fields in
order, a repr naming them, no assignment after construction, copy and pickle. It is ``__slots__``
based: the class is built once, ~20 us. The rest of the model keeps frozen dataclasses (design.md).

Stdlib only, no imports at all: the guard imports it in every vLLM process.
"""

from __future__ import annotations


class _ValueType(type):
    """Turns the annotated names of a class body into ``__slots__`` and their values into defaults."""

    def __new__(mcs, name, bases, namespace):
        own = [field for field, kind in namespace.get("__annotations__", {}).items()
               if not field.startswith("_") and not str(kind).startswith(("ClassVar", "typing.ClassVar"))]
        inherited = [base for base in bases if isinstance(base, _ValueType)]
        fields = tuple(f for base in inherited for f in base._fields) + tuple(own)
        defaults = {k: v for base in inherited for k, v in base._defaults.items()}
        for field in own:
            if field in namespace:
                defaults[field] = namespace.pop(field)
        namespace["__slots__"] = tuple(own)
        namespace["_fields"], namespace["_defaults"] = fields, defaults
        return super().__new__(mcs, name, bases, namespace)


class Value(metaclass=_ValueType):
    """A frozen, slotted value: subclass it and annotate the fields, as for ``@dataclass(frozen=True)``."""

    def __init__(self, *args, **kwargs) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, {len(args)} given")
        put = object.__setattr__
        for field, value in zip(fields, args):
            put(self, field, value)
        for field in fields[len(args):]:
            if field in kwargs:
                put(self, field, kwargs.pop(field))
            elif field in self._defaults:
                put(self, field, self._defaults[field])
            else:
                raise TypeError(f"{type(self).__name__}() missing argument {field!r}")
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected or repeated arguments {sorted(kwargs)}")

    def _values(self) -> tuple:
        return tuple(getattr(self, field) for field in self._fields)

    def as_dict(self) -> dict:
        """The fields by name, in order (a slotted class has no ``__dict__``; cf. ``dataclasses.asdict``,
        without its recursion)."""
        return dict(zip(self._fields, self._values()))

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self._fields)})"

    def __reduce__(self):
        return type(self), self._values()
