"""The Ferry page (pure: snapshots in, one HTML document out).

Served by the Airflow plugin behind Airflow's login. Self-contained for closed networks:
inline CSS, the lag chart drawn here as inline SVG, no script but a timed reload.
Every value from the clusters or the tables is HTML-escaped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from ferry.core.tables import RangeOutcome
from ferry.observe.snapshot import (
    FlowSnapshot,
    LagPoint,
    RunSummary,
    epoch,
    gap_records,
    lag_series,
    latest_verify,
    mismatched,
    run_summaries,
)

REFRESH_SECONDS = 30

_STYLE = """
:root { color-scheme: light dark; --line: #8884; --muted: #888; --bad: #c0392b;
        --good: #1e8449; --accent: #017cee; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px 24px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 0; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.muted { color: var(--muted); } .bad { color: var(--bad); font-weight: 600; }
.good { color: var(--good); }
section.flow { border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px;
               margin: 16px 0; }
dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr));
           gap: 4px 16px; margin: 8px 0; }
dl.facts div { display: flex; flex-direction: column; } dt { color: var(--muted); }
dd { margin: 0; font-weight: 600; }
table { border-collapse: collapse; margin: 4px 0; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid var(--line); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.error { border-left: 4px solid var(--bad); padding: 4px 8px; margin: 8px 0; }
svg.chart text { font-size: 11px; fill: var(--muted); }
"""


def _num(value: int | float | None) -> str:
    return "–" if value is None else f"{value:,}"


def _secs(value: float | None) -> str:
    """1.2 s, 3 m 12 s, 2 h 5 m."""
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    minutes, seconds = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} m {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} m"


def _bytes(value: int) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def _outcome(run: RunSummary, copied_class: str | None) -> str:
    """A run's outcome as the page says it: failed (its error on hover), handed over to a
    newer run of the flow (no failure), or copied."""
    if run.outcome == RangeOutcome.FAILED:
        return f'<span class="bad" title="{escape(run.error or "")}">failed</span>'
    text = "handed over" if run.outcome == RangeOutcome.HANDED_OVER else "copied"
    return text if copied_class is None else f'<span class="{copied_class}">{text}</span>'


def _when(value: datetime | None, now: float) -> str:
    if value is None:
        return "–"
    stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
    return (f'<time datetime="{stamp.isoformat(timespec="seconds")}">'
            f'{stamp.strftime("%Y-%m-%d %H:%M:%S")} UTC</time> '
            f'<span class="muted">({_secs(max(0.0, now - epoch(stamp)))} ago)</span>')


def lag_chart(points: list[LagPoint], width: int = 560, height: int = 140) -> str:
    """Lag in records over time as an inline SVG line chart (time on x, 0..max on y)."""
    if not points:
        return ('<p class="muted lag-chart-empty">No lag history yet: each flow run records '
                'one point.</p>')
    left, right, top, bottom = 56, 8, 8, 22
    inner_w, inner_h = width - left - right, height - top - bottom
    first, last = points[0].at, points[-1].at
    span = max(last - first, 1.0)
    peak = max(max(p.records for p in points), 1)

    def xy(point: LagPoint) -> tuple[float, float]:
        x = left + (inner_w * (point.at - first) / span if len(points) > 1 else inner_w / 2)
        return round(x, 1), round(top + inner_h * (1 - point.records / peak), 1)

    coords = [xy(p) for p in points]
    line = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(
        f'<circle cx="{x}" cy="{y}" r="2.5" fill="var(--accent)"><title>'
        f'{datetime.fromtimestamp(p.at, UTC):%Y-%m-%d %H:%M:%S} UTC: {p.records:,} records, '
        f'{_secs(p.seconds)}</title></circle>' for (x, y), p in zip(coords, points, strict=True))
    start = datetime.fromtimestamp(first, UTC)
    end = datetime.fromtimestamp(last, UTC)
    shown = "%m-%d %H:%M" if span >= 3600 else "%H:%M:%S"  # a short history needs seconds
    return (
        f'<svg class="chart lag-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-points="{len(points)}">'
        f'<title>Lag in records over time</title>'
        f'<line x1="{left}" y1="{top + inner_h}" x2="{left + inner_w}" y2="{top + inner_h}" '
        'stroke="var(--line)"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + inner_h}" stroke="var(--line)"/>'
        f'<text x="{left - 4}" y="{top + 10}" text-anchor="end">{peak:,}</text>'
        f'<text x="{left - 4}" y="{top + inner_h}" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 6}">{start.strftime(shown)}</text>'
        f'<text x="{left + inner_w}" y="{height - 6}" text-anchor="end">'
        f'{end.strftime(shown)} UTC</text>'
        f'<polyline points="{line}" fill="none" stroke="var(--accent)" stroke-width="1.5"/>'
        f'{dots}</svg>')


def _table(head: list[str], rows: list[list[str]], numeric: set[int], css: str,
           attrs: list[str] | None = None) -> str:
    """`attrs`: per row, attributes for its `<tr>` (already escaped)."""
    cells = "".join(f'<th class="num">{h}</th>' if i in numeric else f"<th>{h}</th>"
                    for i, h in enumerate(head))
    body = "".join(
        f"<tr{attrs[n] if attrs else ''}>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                  for i, c in enumerate(row)) + "</tr>" for n, row in enumerate(rows))
    return f'<table class="{css}"><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>'


def _flow(snap: FlowSnapshot, now: float) -> str:
    e = escape
    status = snap.status
    parts = [f'<section class="flow" data-flow="{e(snap.flow)}">',
             f'<h2>{e(snap.source)} → {e(snap.target)}</h2>']
    if snap.error:
        parts.append(f'<p class="error">The clusters did not answer: {e(snap.error)}</p>')
    runs = run_summaries(snap.runs)
    last = runs[0] if runs else None
    outcome = "–" if last is None else _outcome(last, "good")
    checkpoint_age = (max(0.0, now - max(epoch(r["translated_at"]) for r in snap.checkpoints))
                      if snap.checkpoints else None)
    facts = [
        ("Lag", f'<span class="total-lag">{_num(status.lag_records)}</span> records'
         if status else "–"),
        ("Oldest unmirrored record", _secs(max((p.lag_seconds for p in status.partitions),
                                               default=0.0)) if status else "–"),
        ("Last run", f"{e(last.run_id)}<br>{_when(last.finished_at, now)}" if last else "–"),
        ("Outcome", outcome),
        ("Heartbeat latency", _secs(status.heartbeat_latency_s if status else None)
         + (f' <span class="muted">(age {_secs(status.heartbeat_age_s)})</span>'
            if status and status.heartbeat_age_s is not None else "")),
        ("Checkpoints", "never" if checkpoint_age is None
         else f"translated {_secs(checkpoint_age)} ago"),
    ]
    parts.append('<dl class="facts">' + "".join(
        f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts) + "</dl>")

    parts.append("<h3>Lag per partition</h3>")
    if status and status.partitions:
        parts.append(_table(
            ["Topic", "Partition", "Remote topic", "Source end", "Mirrored to", "Lag (records)",
             "Lag (time)"],
            [[e(p.topic), str(p.partition), e(p.remote_topic or snap.remote(p.topic)),
              _num(p.source_end), _num(p.position),
              f'<span class="{"bad" if p.lag_records else "good"}">{p.lag_records:,}</span>',
              _secs(p.lag_seconds)] for p in status.partitions],
            {1, 3, 4, 5, 6}, "partitions",
            [f' data-topic="{e(p.topic)}" data-partition="{p.partition}" '
             f'data-lag-records="{p.lag_records}"' for p in status.partitions]))
    else:
        parts.append('<p class="muted">No mirrored partitions seen.</p>')

    parts.append("<h3>Lag over time</h3>" + lag_chart(lag_series(snap.lag)))

    parts.append("<h3>Latest runs</h3>")
    parts.append(_table(
        ["Run", "Finished", "Ranges", "Records", "Bytes", "Longest range", "Outcome"],
        [[e(r.run_id), _when(r.finished_at, now), str(r.ranges), _num(r.records),
          _bytes(r.bytes), _secs(r.seconds),
          _outcome(r, None)
          + (f" ({r.duplicates:,} duplicates)" if r.duplicates else "")] for r in runs],
        {2, 3, 4, 5}, "runs") if runs else '<p class="muted">No run has copied anything yet.</p>')

    lost = gap_records(snap.gaps)
    parts.append("<h3>Gaps (records deleted by retention before they were mirrored)</h3>")
    if snap.gaps:
        newest = sorted(snap.gaps, key=lambda r: epoch(r["detected_at"]), reverse=True)[:20]
        parts.append(_table(
            ["Topic", "Partition", "Offsets", "Records", "Action", "Detected"],
            [[e(r["topic"]), str(r["partition"]), f"[{r['gap_start']:,}, {r['gap_end']:,})",
              _num(r["records"]), e(str(r["action"])), _when(r["detected_at"], now)]
             for r in newest], {1, 3}, "gaps"))
        parts.append(f'<p class="bad">{sum(lost.values()):,} records lost in total.</p>')
    else:
        parts.append('<p class="muted good">None.</p>')

    checks = latest_verify(snap.verify)
    parts.append("<h3>Verify (latest per partition)</h3>")
    if checks:
        parts.append(_table(
            ["Topic", "Partition", "Offsets", "Checked", "Mismatched", "Outcome", "When"],
            [[e(r["topic"]), str(r["partition"]),
              f"[{r['source_start']:,}, {r['source_end']:,})", _num(r["checked"]),
              f'<span class="{"bad" if mismatched(r) else "good"}">{mismatched(r):,}</span>',
              e(str(r["outcome"])) + (f'<br><span class="muted">{e(str(r["mismatches"]))}'
                                      '</span>' if r.get("mismatches") else ""),
              _when(r["verified_at"], now)] for r in checks.values()], {1, 3, 4}, "verify"))
    else:
        parts.append('<p class="muted">Not verified yet (ferry verify, or the ferry_verify '
                     'DAG).</p>')
    parts.append("</section>")
    return "".join(parts)


def render_page(snapshots: list[FlowSnapshot], now: float, config_path: str,
                problem: str | None = None) -> str:
    """The whole page. `problem`: a config error to show instead of the flows."""
    body = (f'<p class="error">{escape(problem)}</p>' if problem else
            "".join(_flow(s, now) for s in snapshots)
            or '<p class="muted">No enabled flow in this config.</p>')
    stamp = datetime.fromtimestamp(now, UTC)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Ferry</title><style>{_STYLE}</style></head><body>"
        f"<h1>Ferry</h1><p class=\"muted\">Config {escape(config_path)} · read "
        f"{stamp:%Y-%m-%d %H:%M:%S} UTC · refreshes every {REFRESH_SECONDS} s · "
        '<a href="api/flows">JSON</a> · <a href="metrics">metrics</a></p>'
        f"{body}"
        f"<script>setTimeout(() => location.reload(), {REFRESH_SECONDS * 1000});</script>"
        "</body></html>")
