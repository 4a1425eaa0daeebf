#!/usr/bin/env bash
# The wheels of accelsweep's core dependencies that the lent GPU machine's image lacks (it has torch, transformers,
# pandas, pyarrow, jinja2, rich, aiohttp, nvidia-ml-py; it reaches no network), for its Python 3.12, into .whl/
# (git-ignored; the device tool's `carry` takes it, about 40 MB). The ci/gpu scripts install them with --no-index.
# vLLM cannot travel (its wheel and its pinned CUDA torch are far above the tool's 64 MiB): on that machine the
# vllm points end `unsupported` with the install line, and only the hf engine measures.
#   ci/gpu/wheels.sh && du -sh .whl
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --no-deps -d .whl \
  hydra-core==1.3.8 omegaconf==2.3.1 submitit altair vl-convert-python orjson jsonschema jsonschema-rs \
  jsonschema-specifications referencing rpds-py diffusers httptools uvloop   # hydra and omegaconf: the pair tested here
pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3   # omegaconf's pin exists as a source package only
du -sh .whl
