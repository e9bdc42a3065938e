#!/usr/bin/env bash
# Downloads a model from the Hugging Face hub into models/: a Qwen3 safetensors repository
# (short names qwen3-0.6b ... qwen3-8b, or any ORG/REPO id) or one GGUF file of a GGUF
# repository (ORG/REPO:FILE or ORG/REPO:QUANT). Paginated listings, resumed transfers,
# sha256/size verification, HF_ENDPOINT mirrors and HF_TOKEN. The work is done by
# tools/download_model.py (python3, standard library only); `--help` documents it all.
set -euo pipefail
command -v python3 >/dev/null || { echo "download_model.sh: error: python3 is not installed" >&2; exit 1; }
KIPP_DOWNLOAD_PROG=download_model.sh exec python3 "$(dirname "${BASH_SOURCE[0]}")/download_model.py" "$@"
