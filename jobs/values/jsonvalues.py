"""JSON values that people type (a job's args and kwargs, an API body): parsed without a traceback
whatever the text, and accepted only if PostgreSQL's ``jsonb`` stores them as they are.

``jsonb`` refuses a string that ``jobs.values.text`` says it cannot hold (a NUL, a lone surrogate),
and the ``NaN`` / ``Infinity`` that Python's ``json`` writes for non-finite floats; very deep
nesting costs recursion in every reader. Arguments an operator gives are bounded in size
(``check_arguments_size``). Each is a ``ValueError`` with a message for a human, so an edge can put
it on the field it came from.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from jobs.values import text

# Far deeper than any sensible set of arguments, far shallower than any recursion limit.
MAX_DEPTH = 32


def loads(text: str | bytes) -> Any:
    """``json.loads``, with every failure a ``ValueError`` saying what is wrong."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"nested too deeply: at most {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise ValueError("not valid JSON: not UTF-8 text") from None
    except ValueError:  # the only other failure: an integer longer than Python converts
        limit = sys.get_int_max_str_digits()
        raise ValueError(f"a number has too many digits: at most {limit}") from None


def check_storable(value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` (parsed JSON) is stored by ``jsonb`` unchanged."""
    pending: list[tuple[Any, int]] = [(value, 1)]  # a loop, not recursion: depth is the input's
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested too deeply: at most {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key)
                pending.append((inner, depth + 1))
        elif isinstance(item, list):
            pending.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{item} is not a number JSON can store: use a finite number")


def check_arguments_size(value: Any) -> None:
    """Raise ``ValueError`` if ``value`` (storable JSON) is over ``text.MAX_ARGUMENTS_BYTES``
    as compact UTF-8 JSON: a job's or a run's arguments are stored, sent and shown whole."""
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > text.MAX_ARGUMENTS_BYTES:
        raise ValueError(
            f"{size} bytes of JSON: at most {text.MAX_ARGUMENTS_BYTES} (pass a reference to "
            "larger data, not the data)"
        )


def _check_text(string: str) -> None:
    problem = text.problem(string)
    if problem is not None:
        raise ValueError(f"a string {problem}")
