"""Delay rules (`ggml-trace record --delay SPEC`, GGML_TRACE_DELAY), checked before a run starts.

The hooks parse the same syntax (native_hooks/delay_rules.cpp) and refuse what this refuses;
checking here first turns a typo into a one-line error instead of a started program. The op
names of op= are checked by the hooks against the program's own ggml. See docs/delay.md.
"""
from __future__ import annotations

import re
from typing import Any, NoReturn

KINDS = ["graph_compute", "cpy_tensor_async", "set_tensor_async", "get_tensor_async",
         "set_tensor_2d_async", "get_tensor_2d_async", "event_record", "event_wait", "synchronize",
         "comm_allreduce"]
KEYS = ["graph", "split", "op", "tensor", "src", "queue", "nth", "seed"]
MAX_RULES = 32
MAX_RULE_LEN = 159
MAX_US = 60e6
ENV = "GGML_TRACE_DELAY"

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_US = re.compile(r"^(\d+\.?\d*|\.\d+)$")
_SHAPE = "expected BACKEND:KIND[,KEY=VALUE...]:MICROSECONDS"


class DelaySpecError(ValueError):
    pass


def _fail(rule: str, why: str) -> NoReturn:
    raise DelaySpecError(f"bad delay rule '{rule}': {why}")


def parse_rule(rule: str) -> dict:
    """One rule -> {backend, kind, graph, split, nth, op, tensor, src, queue, seed, random, us}; ranges are
    (lo, hi) tuples, absent keys None. Raises DelaySpecError with the reason."""
    rule = rule.strip()
    if len(rule) > MAX_RULE_LEN:
        _fail(rule, f"longer than {MAX_RULE_LEN} characters")
    first, last = rule.find(":"), rule.rfind(":")
    if first < 0 or first == last:
        _fail(rule, _SHAPE)
    backend, middle, us = rule[:first], rule[first + 1:last], rule[last + 1:]
    random = middle.endswith(":rand")
    if random:
        middle = middle[:-5]
    elif middle == "rand" or ":" in middle:
        _fail(rule, _SHAPE)
    if not _US.match(us) or not 0 < float(us) <= MAX_US:
        _fail(rule, "the delay must be a number of microseconds > 0 and <= 60000000, or rand:MAX")
    if not backend:
        _fail(rule, "no backend (use * for any)")
    parts = [p for p in middle.split(",") if p]  # strtok_r skips empty fields too
    if not parts:
        _fail(rule, "no call kind (use * for any)")
    kind = parts[0]
    if kind != "*" and kind not in KINDS:
        _fail(rule, f"unknown call kind ({', '.join(KINDS[:-1])} or {KINDS[-1]} or *)")
    out: dict[str, Any] = {"backend": None if backend == "*" else backend, "kind": None if kind == "*" else kind,
           "graph": None, "split": None, "nth": None, "op": None, "tensor": None, "src": None, "queue": None, "seed": 0,
           "random": random, "us": float(us)}
    for kv in parts[1:]:
        key, eq, v = kv.partition("=")
        if not key or not eq or not v:
            _fail(rule, "keys are KEY=VALUE (graph, split, op, tensor, src, queue, nth, seed)")
        if key in ("graph", "split", "nth"):
            m = _RANGE.match(v)
            if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
                _fail(rule, f"{key}= takes N or A-B (A <= B)")
            out[key] = (int(m.group(1)), int(m.group(2) or m.group(1)))
        elif key == "op":
            if not re.fullmatch(r"\w+", v, re.ASCII):
                _fail(rule, "op= takes a ggml op name such as ADD or MUL_MAT")
            out["op"] = v.upper()
        elif key == "tensor":
            out["tensor"] = v
        elif key in ("src", "queue"):
            if len(v) >= 64:
                _fail(rule, "backend name too long")
            out[key] = v
        elif key == "seed":
            if not v.isdigit():
                _fail(rule, "seed= takes a non-negative integer")
            out["seed"] = int(v)
        else:
            _fail(rule, "unknown key (graph, split, op, tensor, src, queue, nth, seed)")
    if out["op"] and out["kind"] != "graph_compute":
        _fail(rule, "op= applies to graph_compute only")
    if out["src"] and out["kind"] != "cpy_tensor_async":
        _fail(rule, "src= applies to cpy_tensor_async only")
    return out


def parse(rules: list[str]) -> list[dict]:
    """Several rules (each may itself hold rules separated by ';', as the variable does)."""
    flat = [r.strip() for text in rules for r in text.split(";") if r.strip()]
    if not flat:
        raise DelaySpecError("bad delay rules: no rule given")
    if len(flat) > MAX_RULES:
        raise DelaySpecError(f"bad delay rules: at most {MAX_RULES} rules")
    return [parse_rule(r) for r in flat]


def env_value(rules: list[str]) -> str:
    """The GGML_TRACE_DELAY value for `rules`, after checking them."""
    parse(rules)
    return ";".join(r.strip() for text in rules for r in text.split(";") if r.strip())
