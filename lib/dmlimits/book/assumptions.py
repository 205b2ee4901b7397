"""The assumptions page: every value a build used, its meaning and unit, and what differs from
the default scenario."""

from __future__ import annotations

from dmlimits.book.glue import quantity
from dmlimits.core import hardware
from dmlimits.core.scenario import DEFAULT_SCENARIO, SCHEMA, Scenario, resolve


def _fmt(value, unit: str = "") -> str:
    """A value as the page shows it: booleans as true/false, numbers with their unit as a
    reader writes them (``3.352 TB/s``, ``1.125 µs``), choices as they are."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return quantity(value, unit, digits=6)  # the value as set, without float noise
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
                "value": _fmt(value, field.unit),
                "default": _fmt(base, field.unit),
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
        return "Nothing: this book was built with the default scenario."
    if only_changed:
        head = "| Key | This build | Default |\n|---|---|---|"
        lines = [f"| `{r['key']}` | **{r['value']}** | {r['default']} |" for r in rows]
    else:
        head = "| Meaning | Key | Value |\n|---|---|---|"
        lines = [
            f"| {r['meaning']} | `{r['key']}` | "
            f"{'**' + r['value'] + '**' if r['changed'] else r['value']} |"
            for r in rows
        ]
    return "\n".join([head, *lines])


def sources_markdown(scn: Scenario) -> str:
    """Where each hardware value of the scenario's GPU comes from."""
    lines = ["| Key | Source |", "|---|---|"]
    for key, source in hardware.gpu_sources(scn["gpu"]).items():
        lines.append(f"| `{key}` | {source} |")
    return "\n".join(lines)
