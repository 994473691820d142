#!/usr/bin/env python3
"""The documentation's own checks (part of make test): README.md stays the short version
(at most 300 lines; the manual is docs/), and every relative link in README.md and docs/*.md
names a file that exists. Usage: check_docs.py SOURCE_DIR."""
import glob
import os
import re
import sys

MAX_README_LINES = 300


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    readme = os.path.join(root, "README.md")
    n = len(open(readme, encoding="utf-8").read().splitlines())
    if n > MAX_README_LINES:
        problems.append(f"README.md has {n} lines; at most {MAX_README_LINES} (move the rest to docs/)")
    for path in [readme] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^(https?:|#|mailto:)", target):
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
            if not os.path.exists(resolved):
                problems.append(f"{os.path.relpath(path, root)}: link to {target}: no such file")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print(f"docs: README.md {n} lines, every relative link resolves")


if __name__ == "__main__":
    main()
