#!/usr/bin/env bash
# The offline default in one command on a fresh machine: a virtual environment with the
# README's install, the data (copied from ../shared/data beside the checkout where it is
# there, else downloaded), the run, its analysis, and its comparison with the committed
# reference in results/. About 10 minutes on 2 cores after the install; run it again
# and it keeps what is done. The tests: bash .ci/run.
set -euo pipefail
cd "$(dirname "$0")"

[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q -r requirements.txt

if [ ! -f datasets/wikitext-2-raw-v1/wiki.valid.raw ]; then
  if [ -d ../shared/data/wikitext-2-raw-v1 ]; then
    mkdir -p datasets && cp -r ../shared/data/wikitext-2-raw-v1 datasets/
  else
    python datasets/download_wikitext.py
  fi
fi

python src/run_experiments.py --preset tiny --layers all --resamples 20 --signatures embedding,weights,landscape,gradients --out results/quickstart
python src/analyze_results.py --out results/quickstart
toposig compare results results/quickstart
