"""The memory report kept in the index: its JSON with the two time-dependent metrics left as
placeholders, filled in when the report is read."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from .. import lazy
from ..kiwi import gojson
from ..records import recordclass

if TYPE_CHECKING:
    from ..kiwi import report as coverage
else:  # the report's module costs a hook ~15 ms; loaded when a file's facts are first read
    coverage = lazy.module("memdir.kiwi.report")


@recordclass
class ReportText:
    """The report's KiwiFS JSON (no trailing newline) and the fields commands check."""

    json: str
    coverage_pct: float
    warnings: list[str]


# Placeholders for the time-dependent metrics, as gojson.go_string writes them; they come
# before the file lists in KiwiFS's field order, so the first occurrence is the field.
_AVG = "\x01avg_age_days"
_EXPIRED = "\x01expired_count"


@recordclass
class ReportEntry:
    """A cached report: its JSON text with placeholders, and what fills them."""

    generation: int
    mtime_sum: float
    age_n: int
    expires: list[float]
    coverage_pct: float
    warnings: list[str]
    text: str

    @classmethod
    def build(
        cls, facts: list[coverage.FileFacts], prefix: str, now: datetime, generation: int
    ) -> ReportEntry:
        report = coverage.build_report(facts, prefix, now)
        mtime_sum = 0.0
        age_n = 0
        for f in facts:  # the same sum, in the same order, as coverage.build_report
            if not f.memory_status or f.memory_status == "active":
                mtime_sum += f.mtime
                age_n += 1
        data = coverage.report_to_json(report)
        data["avg_age_days"] = _AVG
        data["expired_count"] = _EXPIRED
        return cls(
            generation=generation,
            mtime_sum=mtime_sum,
            age_n=age_n,
            expires=[f.expires_at for f in facts if f.expires_at is not None],
            coverage_pct=report.coverage_pct,
            warnings=list(report.warnings),
            text=gojson.dumps_go(data),
        )

    def dumps(self) -> str:
        head = {k: v for k, v in self.__dict__.items() if k != "text"}
        return json.dumps(head, ensure_ascii=False, separators=(",", ":")) + "\n" + self.text

    @classmethod
    def load(cls, value: str | None, generation: int) -> ReportEntry | None:
        """The cached entry when it belongs to ``generation``."""
        if not value:
            return None
        head, _, text = value.partition("\n")
        try:
            data = json.loads(head)
            if data.get("generation") != generation:
                return None
            return cls(**data, text=text)
        except (ValueError, TypeError):
            return None

    def at(self, now: datetime) -> ReportText:
        now_ts = now.timestamp()
        n = self.age_n
        avg = (now_ts - self.mtime_sum / n) / 86400.0 if n else 0.0
        expired = sum(1 for e in self.expires if e < now_ts)
        text = self.text.replace(gojson.go_string(_AVG), gojson.go_float(avg), 1)
        text = text.replace(gojson.go_string(_EXPIRED), str(expired), 1)
        return ReportText(text, self.coverage_pct, self.warnings)
