"""Name -> function registries, so an ablation is a config string.

An entry may declare what its method needs as keyword attributes of `register` (`check`: a
`check(config)` raising ValueError for a config the method cannot run; others per registry);
code outside the entry's module asks `declared(name, key)` instead of testing the name.

Example::

    ADVANTAGES = Registry('advantage')

    @ADVANTAGES.register('grpo', group_relative=True)
    def grpo(rewards, valid, *, eps=1e-6): ...

    fn = ADVANTAGES.get(config.rl.advantage)
    ADVANTAGES.declared(config.rl.advantage, 'group_relative')  # -> True
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry:
  """A named table of functions; unknown names raise a clear error."""

  def __init__(self, kind: str):
    self.kind = kind
    self._table: Dict[str, Callable] = {}
    self._declared: Dict[str, Dict[str, Any]] = {}

  def register(self, name: str, **declared: Any) -> Callable[[F], F]:
    """Decorator: registers `fn` as `name`, with the entry's `declared` attributes."""
    def deco(fn: F) -> F:
      if name in self._table:
        raise ValueError(f"{self.kind} {name!r} is registered twice")
      self._table[name] = fn
      self._declared[name] = dict(declared)
      return fn

    return deco

  def declared(self, name: str, key: str, default: Any = None) -> Any:
    """The attribute `key` that entry `name` declared at registration (`default` if it
    declared none, or if no entry is called `name`)."""
    return self._declared.get(name, {}).get(key, default)

  def get(self, name: str) -> Callable:
    try:
      return self._table[name]
    except KeyError:
      close = difflib.get_close_matches(str(name), list(self._table), n=1)
      hint = f"; did you mean {close[0]!r}?" if close else ""
      raise KeyError(
          f"unknown {self.kind} {name!r}; expected one of {sorted(self._table)}{hint}"
      ) from None

  def names(self) -> Iterable[str]:
    return sorted(self._table)

  def entries(self) -> list[tuple[str, Callable]]:
    """(name, function) pairs in registration order (for registries whose order matters)."""
    return list(self._table.items())

  def __contains__(self, name: str) -> bool:
    return name in self._table
