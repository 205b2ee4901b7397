"""The assumptions page: every value a build used, its meaning and unit, and what differs from
the default scenario."""

from __future__ import annotations

from . import hardware
from .scenario import DEFAULT_SCENARIO, SCHEMA, Scenario, resolve


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(scn: Scenario) -> list[dict[str, str]]:
    """One row per key: key, value, default value, unit, meaning, source, changed."""
    default = resolve(DEFAULT_SCENARIO)
    sources = hardware.gpu_sources(scn["gpu"])
    rows = []
    for key, field in SCHEMA.items():
        value, base = scn.values[key], default.values[key]
        source = sources.get(key, "")
        if key in dict(scn.overrides):
            source = "set for this build"
        rows.append(
            {
                "key": key,
                "value": _fmt(value),
                "default": _fmt(base),
                "unit": field.unit,
                "meaning": field.doc,
                "source": source,
                "changed": value != base,
            }
        )
    return rows


def markdown(scn: Scenario, only_changed: bool = False) -> str:
    """Every value (meaning, key, value, unit), or only those that differ, beside the default."""
    rows = [r for r in table(scn) if r["changed"] or not only_changed]
    if not rows:
        return "*None: this book was built with the default scenario.*"
    if only_changed:
        head = "| Key | This build | Default | Unit |\n|---|---|---|---|"
        lines = [
            f"| `{r['key']}` | **{r['value']}** | {r['default']} | {r['unit']} |" for r in rows
        ]
    else:
        head = "| Meaning | Key | Value | Unit |\n|---|---|---|---|"
        lines = [
            f"| {r['meaning']} | `{r['key']}` | "
            f"{'**' + r['value'] + '**' if r['changed'] else r['value']} | {r['unit']} |"
            for r in rows
        ]
    return "\n".join([head, *lines])


def sources_markdown(scn: Scenario) -> str:
    """Where each hardware value of the scenario's GPU comes from."""
    lines = ["| Key | Source |", "|---|---|"]
    for key, source in hardware.gpu_sources(scn["gpu"]).items():
        lines.append(f"| `{key}` | {source} |")
    return "\n".join(lines)
