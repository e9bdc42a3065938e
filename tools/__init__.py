"""Kipp's Python tools: the HF → GGUF converter, the GGUF writer and quantizer, the tiny and
random-weight model makers, the golden-vector maker and the single-engine benchmark. Run them
as modules from the repository root, e.g. `.venv/bin/python -m tools.convert_to_gguf ...`
(docs/tools.md); they import each other as `tools.NAME` and the benchmark library as
`bench.benchlib`."""
