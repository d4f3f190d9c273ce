"""Values that broke an edge once or sit on a limit, which the fuzz tests of every way in (the
admin's form, the CLI) spoil their inputs with."""

from __future__ import annotations

# Control characters, which no name that is printed or routed may hold (jobs.values.names), and the
# NUL, which no text PostgreSQL stores may hold.
CONTROL = ["\x00", "a\x00b", "a\nb", "a\rb", "\n", "a\u2028b", "a\u2029b", "\x1b[2J", "a\x85b"]
# Keyword arguments that are JSON yet broke an edge once: numbers no float holds, a deep nesting,
# a city too long for tests.by_city's lock key.
BAD_RECORD_KWARGS = [
    '{"log": "-", "seconds": NaN}',
    '{"log": "-", "seconds": 1e400}',
    '{"log": "-", "seconds": ' + "[" * 40 + "]" * 40 + "}",
    '{"log": "-", "city": "' + "x" * 300 + '"}',
]
# Lone surrogates: what JSON's "\ud800" escape and a command line's invalid UTF-8 byte (Python's
# surrogateescape) put in a string, which neither UTF-8 nor PostgreSQL can hold (jobs.values.text).
UNENCODABLE = ["\ud800", "a\udfffb", "\udcff"]
