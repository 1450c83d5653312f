#!/usr/bin/env bash
# Install everything the test suite needs, then run it offline. Used by the README and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-dev.txt
# The optional IndexTTS 2 family (see the file for why --no-deps), so its tests run too.
python3 -m pip install -q --no-deps -r requirements-indextts2.txt
# Debian's chromium (and a CJK font for readable screenshots) for the browser tests; playwright cannot download its own browser here.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-zenhei >/dev/null) \
    || echo "warning: could not install chromium; browser tests will be skipped"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
exec python3 -m pytest "$@"
