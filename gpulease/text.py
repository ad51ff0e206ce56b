"""Small text helpers shared by messages across gpulease (no dependencies)."""
from __future__ import annotations

from typing import Optional, Union

#: irregular plurals gpulease prints; everything else takes "s".
_PLURALS = {"policy": "policies", "copy": "copies", "entry": "entries", "is": "are",
            "was": "were", "this": "these", "does": "do", "has": "have", "exists": "exist",
             "keeps": "keep"}


def plural(n: Union[int, float], singular: str, plural_form: Optional[str] = None, *,
           number: bool = True) -> str:
    """"1 node", "2 nodes", "0 nodes", "1,204 resources"; ``number=False`` gives the word only."""
    word = singular if n == 1 else (plural_form or _PLURALS.get(singular, singular + "s"))
    if not number:
        return word
    count = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{count} {word}"
