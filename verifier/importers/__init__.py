"""Importers: models from other tools, converted to the model format (docs/model-format.md).

Each is an optional extra that the core never imports: `tracr` (RASP programs compiled by Tracr)
and `transformer_lens` (state dicts in TransformerLens naming, from .safetensors or .pt files).
"""
