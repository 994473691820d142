#!/usr/bin/env bash
# Builds the manual (docs/, configured by mkdocs.yml) into a static site with
# Debian's mkdocs, in strict mode: any warning (a link to a missing page, a
# link out of docs/, a page left out of the nav's files) fails the build.
# Nothing is fetched from the network. Used by `make docs` and the ctest
# docs.site. Usage: build_docs.sh [SITE_DIR] (default build/site).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
site=${1:-$root/build/site}
if ! command -v mkdocs >/dev/null 2>&1; then
  echo "docs: mkdocs is not installed; tools/install_deps.sh (make deps) installs Debian's" \
    "mkdocs package, or: apt-get install mkdocs" >&2
  exit 1
fi
mkdocs build --strict --quiet --config-file "$root/mkdocs.yml" --site-dir "$site"
echo "docs: $(find "$site" -name '*.html' | wc -l) pages in $site (open $site/index.html)"
