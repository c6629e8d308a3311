"""Server-rendered charts for the console's dashboard: horizontal bar charts as inline SVG data.

No JavaScript and no chart library: each chart is a list of bars (label, value, width in
percent) that the template draws as SVG ``rect`` elements with a text table beside them, so a
screen reader and a text browser get the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["AGE_BUCKETS", "Bar", "Chart", "age_buckets", "chart", "per_minute"]

#: Upper bounds (seconds) and labels of the age buckets of uncertain rows.
AGE_BUCKETS: tuple[tuple[float, str], ...] = (
    (60.0, "under 1 min"),
    (600.0, "1-10 min"),
    (3600.0, "10-60 min"),
    (86400.0, "1-24 h"),
    (float("inf"), "over 24 h"),
)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    percent: float
    shown: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    empty: str
    key: str
    column: str

    @property
    def total(self) -> str:
        return f"{sum(b.value for b in self.bars):g}"


def chart(
    title: str,
    values: Mapping[str, float],
    *,
    key: str,
    column: str = "count",
    empty: str = "nothing yet",
    unit: str = "",
) -> Chart:
    """Bars scaled to the largest value (kept in the order given)."""
    top = max(values.values(), default=0)
    bars = [
        Bar(label, value, round(100.0 * value / top, 1) if top else 0.0, f"{value:g}{unit}")
        for label, value in values.items()
    ]
    return Chart(title, bars, empty, key, column)


def per_minute(counts: Mapping[str, int], seconds: float) -> dict[str, float]:
    """Counts over a window of ``seconds`` as rates per minute (two decimals)."""
    return {k: round(n * 60.0 / seconds, 2) for k, n in sorted(counts.items())}


def age_buckets(ages: Iterable[float]) -> dict[str, int]:
    """Counts of ``ages`` (seconds) per bucket, every bucket present."""
    counts = {label: 0 for _, label in AGE_BUCKETS}
    for age in ages:
        for bound, label in AGE_BUCKETS:
            if age < bound:
                counts[label] += 1
                break
    return counts
