#!/usr/bin/env python3
"""Ratio and absolute gates over gungraun's instruction counts.

Usage: instruction_gates.py GATES.toml COUNTS.jsonl [--markdown]

COUNTS.jsonl is the output of
`cargo bench --bench instructions -- --output-format=json`: one JSON summary
per benchmark run. Each benchmark of benches/instructions.rs runs twice, with
ids `ops_R` and `ops_2R`; instructions per operation are
(I(2R) - I(R)) / R, so the fixed cost of the call cancels exactly.

Prints one table row per [[row]] of GATES.toml and exits 1 when an
"enforced" gate is not met, or when the input is not what it should be (a
benchmark missing, a count unreadable, a gate malformed): a checker that
cannot read its input must not pass. "pending" gates are reported, flagged,
and do not fail. `--markdown` prints the table as Markdown (for the README).
"""

import json
import re
import sys
import tomllib

STATUSES = ("enforced", "pending")


class InputError(Exception):
    pass


def instructions(summary):
    """The Callgrind `Ir` count of one benchmark summary (schema version 7:
    profiles[tool = Callgrind].data.total.metrics.Ir.values.new)."""
    name = summary.get("function_name")
    if summary.get("version") != "7":
        raise InputError(f"{name}: summary schema version {summary.get('version')!r}, expected '7' (gungraun 0.20)")
    try:
        for profile in summary["profiles"]:
            if profile["tool"] == "Callgrind":
                value = profile["data"]["total"]["metrics"]["Ir"]["values"]["new"]
                if isinstance(value, int):
                    return value
    except (KeyError, TypeError) as e:
        raise InputError(f"{name}: unreadable summary: missing {e!r}")
    raise InputError(f"{name}: no Callgrind instruction count")


def per_operation(path):
    """{function name: instructions per operation} from the JSON lines."""
    runs = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                summary = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not JSON: {e}")
            name = summary.get("function_name")
            m = re.fullmatch(r"ops_(\d+)", summary.get("id") or "")
            if not name or not m:
                raise InputError(f"{path}:{n}: benchmark without an ops_<n> id: {name} {summary.get('id')}")
            runs.setdefault(name, {})[int(m.group(1))] = instructions(summary)
    result = {}
    for name, by_ops in runs.items():
        if len(by_ops) != 2:
            raise InputError(f"{name}: need exactly two runs (ops_R, ops_2R), got {sorted(by_ops)}")
        r, r2 = sorted(by_ops)
        if r2 != 2 * r:
            raise InputError(f"{name}: runs ops_{r} and ops_{r2} are not R and 2R")
        delta = by_ops[r2] - by_ops[r]
        if delta <= 0:
            raise InputError(f"{name}: {r2} operations cost no more than {r} ({by_ops})")
        result[name] = delta / r
    return result


def fmt(x):
    """An exact integer as such, else one decimal; thin-space thousands."""
    text = f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"
    return text.replace(",", " ")


def check(gates_path, counts_path, markdown=False):
    with open(gates_path, "rb") as f:
        rows = tomllib.load(f).get("row", [])
    if not rows:
        raise InputError(f"{gates_path}: no [[row]]")
    counts = per_operation(counts_path)

    table = []
    failures, pending = [], []
    for row in rows:
        name = row.get("name")
        ours = row.get("ours")
        peer = row.get("peer")
        max_ratio = row.get("max_ratio")
        max_ins = row.get("max_instructions")
        status = row.get("status")
        if not name or not ours:
            raise InputError(f"{gates_path}: a row needs `name` and `ours`: {row}")
        for bench in (ours, peer):
            if bench is not None and bench not in counts:
                raise InputError(f"row {name!r}: benchmark {bench!r} is not in {counts_path}")
        if max_ratio is not None and peer is None:
            raise InputError(f"row {name!r}: max_ratio needs a peer")
        if max_ratio is not None and max_ins is not None:
            raise InputError(f"row {name!r}: one gate a row")
        gated = max_ratio is not None or max_ins is not None
        if gated and status not in STATUSES:
            raise InputError(f"row {name!r}: status must be one of {STATUSES}, not {status!r}")
        if not gated and status is not None:
            raise InputError(f"row {name!r}: status {status!r} without a gate")

        ours_n = counts[ours]
        peer_n = counts[peer] if peer else None
        ratio = ours_n / peer_n if peer_n else None
        if max_ratio is not None:
            value, limit, unit = ratio, max_ratio, "×"
        elif max_ins is not None:
            value, limit, unit = ours_n, max_ins, " instructions"
        else:
            value = limit = None

        label = f"{name} vs {row.get('peer_name', peer)}" if peer else name
        if value is None:
            verdict = "—"
        elif value <= limit:
            verdict = "ok" if status == "enforced" else "met, pending: can be enforced"
        elif status == "enforced":
            verdict = "FAIL"
            failures.append(
                f"{label}: {value:.3f}{unit} exceeds its enforced gate of {limit}{unit}"
                + (f" (tailguard {fmt(ours_n)}, peer {fmt(peer_n)} instructions)" if peer else "")
            )
        else:
            verdict = "PENDING, not met"
            pending.append(f"{label}: target {limit}{unit}, now {value:.3f}{unit}")
        gate = (
            f"≤ {max_ratio}×" if max_ratio is not None
            else f"≤ {max_ins}" if max_ins is not None
            else "—"
        )
        table.append((
            name,
            fmt(ours_n),
            f"{row.get('peer_name', peer)}: {fmt(peer_n)}" if peer else "—",
            f"{ratio:.3f}×" if ratio is not None else "—",
            gate,
            verdict,
        ))

    header = ("operation", "tailguard", "peer", "ratio", "gate", "status")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in table:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(r[i]) for r in table + [header]) for i in range(len(header))]
        for r in [header] + table:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print()
    print("instructions per operation (Callgrind Ir, (I(2R) - I(R)) / R)")
    for p in pending:
        print(f"PENDING gate, not met yet (does not fail CI): {p}")
    for f in failures:
        print(f"FAILED enforced gate: {f}")
    return 1 if failures else 0


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 2 or any(a not in ("--markdown",) for a in argv[1:] if a.startswith("--")):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return check(args[0], args[1], markdown="--markdown" in argv)
    except (InputError, OSError, tomllib.TOMLDecodeError) as e:
        print(f"instruction gates: cannot check: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
