#!/usr/bin/env bash
# ansible-test sanity on the collection (make lint runs this).
#
# ansible-test wants the collection at ansible_collections/<namespace>/<name>/, so the checkout's
# files (tracked and new, not ignored) are copied into such a tree in a temporary directory and
# the test runs there, on this venv's Python (--local: no containers). Its targets are the
# Ansible side of the repository (plugins/, roles/, playbooks/, meta/); the Python package,
# the tests and these scripts are checked by ruff (make lint). Exceptions, each with its reason:
# tests/sanity/ignore-2.19.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/ansible_collections/specdeploy/toolkit
mkdir -p "$tree"
cd "$repo"
git ls-files -co --exclude-standard -z \
  | while IFS= read -r -d '' f; do [[ -e $f && $f != collections/* ]] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$tree"
# ansible-test bootstraps pip in its test venvs with get-pip.py from ci-files.testing.ansible.com;
# where that cannot be reached, the same bootstrap from the interpreter's ensurepip.
cache=$HOME/.ansible/test/cache
pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',$/\1/p" \
  "$("$venv/bin/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py")
if [[ -n $pip_version && ! -e $cache/get_pip_${pip_version//./_}.py ]]; then
  mkdir -p "$cache"
  cp "$repo/scripts/get_pip_offline.py" "$cache/get_pip_${pip_version//./_}.py"
fi
cd "$tree"
"$venv/bin/ansible-test" sanity --local --python "$python_version" --color no \
  "$@" plugins/ roles/ playbooks/ meta/
