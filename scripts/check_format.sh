#!/usr/bin/env bash
# Checks that every C++ and CUDA source is formatted by .clang-format (clang-format 14, Debian's).
# Prints the files that differ and exits 1; `scripts/check_format.sh --fix` formats them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "check_format: clang-format not found (scripts/install_deps.sh installs it)" >&2
  exit 2
fi
# Each clang-format release lays some constructs out differently, so the check means something
# only with the version the tree is formatted with; another one (Debian 13 has 19) skips it.
major=$("$fmt" --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
if [ "$major" != 14 ] && [ "${1:-}" != "--fix" ]; then
  echo "check_format: skipped: $fmt is version $major, the tree is formatted with clang-format 14 (Debian 12's)"
  exit 0
fi
# The tracked sources, or, outside a git checkout (an unpacked archive), every source of the tree.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \
    -o -name '*.cuh' \) -print | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no sources found" >&2
  exit 2
fi
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check_format: ${#bad[@]} file(s) not formatted (scripts/check_format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
