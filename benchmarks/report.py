"""Writing benchmark results into docs/benchmarks.md, between a section's markers."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, section: str, content: str) -> None:
    """Put `content` between `<!-- SECTION:begin -->` and `<!-- SECTION:end -->` in `path`."""
    begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
    text = path.read_text()
    if begin not in text or end not in text:
        raise ValueError(f"{path} has no {begin} ... {end} markers")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    path.write_text(f"{head}{begin}\n{content}{end}{tail}")
