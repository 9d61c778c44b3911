#!/usr/bin/env python3
"""Checks that every table row of README.md's *Simulation* section is a line
that `cargo run --release --example simulate` (seed 42, the defaults)
printed: the README's numbers come from that command, and stay so.

Usage: readme_tables.py README.md SIMULATE_OUTPUT
"""
import sys


def simulation_rows(readme):
    rows, inside = [], False
    for line in readme.splitlines():
        if line.startswith("## "):
            inside = line.startswith("## Simulation")
            continue
        # Data rows only: not a header (its next line is the separator) or
        # the separator itself.
        if inside and line.startswith("| ") and not line.startswith("|---"):
            rows.append(line.rstrip())
    # Drop header rows: those followed by a separator line in the README.
    lines = readme.splitlines()
    headers = {
        lines[i].rstrip()
        for i in range(len(lines) - 1)
        if lines[i + 1].startswith("|---")
    }
    return [r for r in rows if r not in headers]


def main():
    readme = open(sys.argv[1], encoding="utf-8").read()
    printed = {l.rstrip() for l in open(sys.argv[2], encoding="utf-8")}
    rows = simulation_rows(readme)
    missing = [r for r in rows if r not in printed]
    print(f"README simulation tables: {len(rows) - len(missing)} of {len(rows)} rows printed by simulate")
    for r in missing:
        print(f"  not printed: {r}")
    if not rows or missing:
        sys.exit(1)


main()
