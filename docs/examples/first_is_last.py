"""A reference function for docs/lower-bounds.md: is the first token the last one?"""


def f(s: list[str]) -> int:
    return int(s[0] == s[-1])
