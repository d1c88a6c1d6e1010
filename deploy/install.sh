#!/usr/bin/env bash
# Installs grps-py (no dev extras) into a new virtual environment. deploy/Dockerfile and
# deploy/Dockerfile.cuda RUN this script, and tests/deploy/test_image_steps.py runs it into a clean
# venv, so the image's install steps are exercised even where no container engine runs.
#
#   deploy/install.sh --venv DIR [--source DIR] [--python PYTHON] [--extras LIST] [--extra-index-url URL]
#
#   --venv DIR             where the virtual environment goes (must not exist yet)
#   --source DIR           the grps-py checkout (default: this script's repository); read, never written
#   --python PYTHON        the interpreter that makes the venv (default: python3)
#   --extras LIST          optional extras, comma separated, e.g. "flask" (default: none)
#   --extra-index-url URL  another package index for pip, e.g. PyTorch's CPU wheel index so that the
#                          CPU image gets torch's CPU build (default: none)
#
# The steps are the Makefile's install target less the dev extras and the editable install:
# a venv, the newest pip, then the package pinned by constraints.txt.
set -euo pipefail

usage() { sed -n '6,13p' "$0" | sed 's/^# \{0,1\}//'; }

venv=""
source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="python3"
extras=""
extra_index_url=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --venv | --source | --python | --extras | --extra-index-url)
            if [ $# -lt 2 ]; then
                echo "install.sh: $1 needs a value" >&2
                exit 2
            fi
            case "$1" in
                --venv) venv="$2" ;;
                --source) source_dir="$2" ;;
                --python) python="$2" ;;
                --extras) extras="$2" ;;
                --extra-index-url) extra_index_url="$2" ;;
            esac
            shift 2
            ;;
        *)
            echo "install.sh: unknown argument: $1" >&2
            usage >&2
            exit 2
            ;;
    esac
done
if [ -z "$venv" ]; then
    echo "install.sh: --venv DIR is required" >&2
    usage >&2
    exit 2
fi
if [ -e "$venv" ]; then
    echo "install.sh: $venv already exists; the install goes into a new venv" >&2
    exit 2
fi
if [ ! -f "$source_dir/pyproject.toml" ] || [ ! -f "$source_dir/constraints.txt" ]; then
    echo "install.sh: $source_dir is not a grps-py checkout (no pyproject.toml or constraints.txt)" >&2
    exit 2
fi

# setuptools builds in the source tree (build/, *.egg-info): build from a copy, so that the source can
# be a read-only mount or a developer's checkout that must stay clean.
build_dir="$(mktemp -d)"
trap 'rm -rf "$build_dir"' EXIT
tar -C "$source_dir" \
    --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude='*.egg-info' \
    --exclude=.mypy_cache --exclude=.ruff_cache --exclude=.pytest_cache --exclude=.hypothesis \
    --exclude=./logs --exclude=./build --exclude=./dist --exclude=./tests/output \
    --exclude=./.whl --exclude=./.gl \
    -cf - . | tar -C "$build_dir" -xf -

requirement="$build_dir"
if [ -n "$extras" ]; then
    requirement="${build_dir}[${extras}]"
fi
index_args=()
if [ -n "$extra_index_url" ]; then
    index_args=(--extra-index-url "$extra_index_url")
fi

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install -c "$build_dir/constraints.txt" "${index_args[@]}" "$requirement"
# The entry point must start: a broken install fails here, at build time, not in the first pod.
"$venv/bin/grps-py" --help >/dev/null
echo "install.sh: grps-py installed in $venv"
