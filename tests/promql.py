"""A small PromQL parser for the dashboard's tests: syntax, types and the series a query names.

It covers what a dashboard query uses (selectors with matchers, range selectors and ``offset``,
functions, aggregations with ``by``/``without`` before or after their argument, arithmetic and
comparison operators, parentheses, numbers and strings) and checks the types Prometheus checks
(``rate`` takes a range vector, an aggregation an instant vector, a range only follows a
selector). Where the ``promtool`` binary is installed the tests run Prometheus' own parser too.
"""

from __future__ import annotations

import re

AGGREGATIONS = {
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "group",
    "topk", "bottomk", "quantile", "count_values",
}  # fmt: skip
WITH_PARAMETER = {"topk", "bottomk", "quantile", "count_values"}
# function -> the type of each argument ("vector", "matrix", "scalar", "string").
FUNCTIONS = {
    "rate": ("matrix",),
    "irate": ("matrix",),
    "increase": ("matrix",),
    "delta": ("matrix",),
    "avg_over_time": ("matrix",),
    "max_over_time": ("matrix",),
    "min_over_time": ("matrix",),
    "sum_over_time": ("matrix",),
    "last_over_time": ("matrix",),
    "abs": ("vector",),
    "clamp_min": ("vector", "scalar"),
    "clamp_max": ("vector", "scalar"),
    "round": ("vector",),
    "scalar": ("vector",),
    "vector": ("scalar",),
}
BINARY = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"}
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)(?![\w.])
    | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>(){}\[\],])
    )""",
    re.VERBOSE,
)


class PromQLError(ValueError):
    """The query does not parse, or its types do not fit."""


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query selects; raises :class:`PromQLError` if it is invalid."""
    parser = _Parser(query)
    kind = parser.expression()
    if parser.peek() is not None:
        raise PromQLError(f"unexpected {parser.peek()!r} in {query!r}")
    if kind == "matrix":
        raise PromQLError(f"a range vector cannot be graphed: {query!r}")
    return parser.names


def tokenize(query: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(query):
        if not query[at:].strip():
            break
        match = _TOKEN.match(query, at)
        if not match or match.end() == at:
            raise PromQLError(f"cannot read {query[at:]!r}")
        tokens.append((match.lastgroup, match.group(match.lastgroup)))
        at = match.end()
    return tokens


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = tokenize(query)
        self.at = 0
        self.names: set[str] = set()

    def peek(self, ahead: int = 0) -> str | None:
        index = self.at + ahead
        return self.tokens[index][1] if index < len(self.tokens) else None

    def take(self, expected: str | None = None, kind: str | None = None) -> str:
        if self.at >= len(self.tokens):
            raise PromQLError(f"{self.query!r} ends early")
        token_kind, text = self.tokens[self.at]
        if (expected is not None and text != expected) or (kind is not None and token_kind != kind):
            raise PromQLError(f"expected {expected or kind}, found {text!r} in {self.query!r}")
        self.at += 1
        return text

    def expression(self) -> str:
        left = self.unary()
        while self.peek() in BINARY:
            operator = self.take()
            if self.peek() == "bool":
                self.take()
            if self.peek() in ("on", "ignoring"):
                self.take()
                self.labels()
                if self.peek() in ("group_left", "group_right"):
                    self.take()
                    if self.peek() == "(":
                        self.labels()
            right = self.unary()
            if "matrix" in (left, right) or "string" in (left, right):
                raise PromQLError(f"{operator!r} needs instant vectors or scalars: {self.query!r}")
            left = "vector" if "vector" in (left, right) else "scalar"
        return left

    def unary(self) -> str:
        if self.peek() in ("-", "+"):
            self.take()
            return self.unary()
        kind = self.primary()
        if self.peek() == "[":
            if kind != "selector":
                raise PromQLError(f"a range needs a selector before it: {self.query!r}")
            self.take("[")
            self.take(kind="duration")
            self.take("]")
            kind = "matrix"
        if self.peek() == "offset":
            self.take()
            self.take(kind="duration")
        return "vector" if kind == "selector" else kind

    def primary(self) -> str:
        token_kind, text = self.tokens[self.at] if self.at < len(self.tokens) else (None, None)
        if text == "(":
            self.take()
            kind = self.expression()
            self.take(")")
            return kind
        if token_kind == "number":
            self.take()
            return "scalar"
        if token_kind == "string":
            self.take()
            return "string"
        if text == "{":
            self.matchers()
            return "selector"
        if token_kind == "name":
            if text in AGGREGATIONS and self.peek(1) in ("(", "by", "without"):
                return self.aggregation()
            if self.peek(1) == "(":
                return self.call()
            self.names.add(self.take())
            if self.peek() == "{":
                self.matchers()
            return "selector"
        raise PromQLError(f"unexpected {text!r} in {self.query!r}")

    def aggregation(self) -> str:
        name = self.take()
        grouped = self.grouping()
        self.take("(")
        if name in WITH_PARAMETER:
            self.expression()
            self.take(",")
        if self.expression() != "vector":
            raise PromQLError(f"{name} needs an instant vector: {self.query!r}")
        self.take(")")
        if not grouped:
            self.grouping()
        return "vector"

    def grouping(self) -> bool:
        if self.peek() in ("by", "without"):
            self.take()
            self.labels()
            return True
        return False

    def call(self) -> str:
        name = self.take()
        if name not in FUNCTIONS:
            raise PromQLError(f"unknown function {name!r} in {self.query!r}")
        self.take("(")
        kinds = []
        while self.peek() != ")":
            kinds.append(self.expression())
            if self.peek() == ",":
                self.take()
        self.take(")")
        if tuple(kinds) != FUNCTIONS[name]:
            raise PromQLError(f"{name} takes {FUNCTIONS[name]}, given {kinds}: {self.query!r}")
        return "scalar" if name == "scalar" else "vector"

    def labels(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek() != ")":
            names.append(self.take(kind="name"))
            if self.peek() == ",":
                self.take()
        self.take(")")
        return names

    def matchers(self) -> None:
        self.take("{")
        while self.peek() != "}":
            label = self.take(kind="name")
            operator = self.take()
            if operator not in ("=", "!=", "=~", "!~"):
                raise PromQLError(f"bad matcher {label}{operator} in {self.query!r}")
            value = self.take(kind="string")
            if label == "__name__" and operator == "=":
                self.names.add(value[1:-1])
            if self.peek() == ",":
                self.take()
        self.take("}")
