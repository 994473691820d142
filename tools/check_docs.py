#!/usr/bin/env python3
"""The documentation's own checks (part of make test): README.md stays the short version
(at most 300 lines; the manual is docs/), every relative link in README.md and docs/*.md
names a file that exists, and every `page.md#anchor` (or `#anchor`) names a heading of that
page, by the ids mkdocs gives headings (Python-Markdown's toc slugs). mkdocs.yml's strict build
(tools/build_docs.sh, the ctest docs.site) checks the rest; mkdocs 1.4 does not check anchors.
Pure standard library. Usage: check_docs.py SOURCE_DIR."""
import glob
import os
import re
import sys
import unicodedata

MAX_README_LINES = 300


def slugify(text):
    """The id Python-Markdown's toc extension (mkdocs' default) gives a heading: its text
    without inline markup, ASCII-folded, punctuation dropped, lowercase, runs of spaces and
    hyphens as one hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path, cache={}):
    """The heading ids of a Markdown file, as mkdocs renders it (a repeated id gets _1, _2)."""
    if path not in cache:
        ids, fence = set(), None
        for line in open(path, encoding="utf-8").read().splitlines():
            m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif line.strip().startswith(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            m = re.match(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", line)
            if m:
                base = slug = slugify(m.group(2))
                n = 0
                while slug in ids:
                    n += 1
                    slug = f"{base}_{n}"
                ids.add(slug)
        cache[path] = ids
    return cache[path]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    readme = os.path.join(root, "README.md")
    n = len(open(readme, encoding="utf-8").read().splitlines())
    if n > MAX_README_LINES:
        problems.append(f"README.md has {n} lines; at most {MAX_README_LINES} (move the rest to docs/)")
    pages = [readme] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    fragments = 0
    for path in pages:
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^(https?:|mailto:)", target):
                continue
            file, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                problems.append(f"{os.path.relpath(path, root)}: link to {target}: no such file")
                continue
            if fragment and resolved.endswith(".md"):
                fragments += 1
                if fragment not in anchors(resolved):
                    problems.append(f"{os.path.relpath(path, root)}: link to {target}: "
                                    f"{os.path.relpath(resolved, root)} has no heading #{fragment}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print(f"docs: README.md {n} lines, every relative link resolves ({fragments} to a heading)")


if __name__ == "__main__":
    main()
