"""Tracr's shift_by(1, tokens): the token one position back, and no value (None) at position 0.

    verify tracr docs/examples/shift_by.py --vocab a,b,c --max-len 4 --p 2 --f 0

Position 0 needs no answer; the verdict judges the others (docs/your-own-model.md)."""

from tracr.compiler import lib
from tracr.rasp import rasp

program = lib.shift_by(1, rasp.tokens)
