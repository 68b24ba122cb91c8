"""Name -> function registries, so an ablation is a config string.

Example::

    ADVANTAGES = Registry('advantage')

    @ADVANTAGES.register('grpo')
    def grpo(rewards, valid, *, eps=1e-6): ...

    fn = ADVANTAGES.get(config.rl.advantage)
"""

from __future__ import annotations

import difflib
from typing import Callable, Dict, Iterable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry:
  """A named table of functions; unknown names raise a clear error."""

  def __init__(self, kind: str):
    self.kind = kind
    self._table: Dict[str, Callable] = {}

  def register(self, name: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
      if name in self._table:
        raise ValueError(f"{self.kind} {name!r} is registered twice")
      self._table[name] = fn
      return fn

    return deco

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
