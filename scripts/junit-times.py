#!/usr/bin/env python3
"""Prints what a nextest JUnit report says of time: the totals, each test binary's summed
test time (heaviest first) and the heaviest tests. scripts/test.sh runs it after the tests.

usage: python3 scripts/junit-times.py target/nextest/ci/junit.xml [N]
"""
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    root = ET.parse(sys.argv[1]).getroot()
    by_binary = defaultdict(float)
    tests = []
    failed = 0
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            seconds = float(case.get("time") or 0)
            by_binary[suite.get("name")] += seconds
            tests.append((seconds, f"{suite.get('name')} {case.get('name')}"))
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
    wall = float(root.get("time") or 0)
    print(f"\nall tests: {len(tests) - failed} passed, {failed} failed, in {wall:.0f} s "
          f"(the tests' own times sum to {sum(by_binary.values()):.0f} s)")
    print(f"\n{'binary':<48} {'tests':>6} {'s':>8}")
    counts = defaultdict(int)
    for _, name in tests:
        counts[name.split(" ")[0]] += 1
    for name, seconds in sorted(by_binary.items(), key=lambda kv: -kv[1]):
        print(f"{name:<48} {counts[name]:>6} {seconds:>8.1f}")
    print(f"\nthe {top} heaviest tests")
    for seconds, name in sorted(tests, reverse=True)[:top]:
        print(f"{seconds:>8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
