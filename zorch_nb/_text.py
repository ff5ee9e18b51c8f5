"""Text pieces shared by messages and reprs."""

__all__ = ["elided_list"]


def elided_list(values, head: int, tail: int, most: int = 8) -> str:
    """``values`` as a list literal, all of them up to ``most``, else the first
    ``head`` and last ``tail`` around ``...`` (a repr or a message naming
    thousands of entries said nothing the ends do not)."""
    values = [int(v) for v in values]
    shown = values if len(values) <= most else values[:head] + ["..."] + values[-tail:]
    return f"[{', '.join(map(str, shown))}]"
