"""The pieces every lecture of the course shows the same way: its timed plan and its live demo.

A lecture (``lectures/NN-*.md``, built into a reveal.js deck by :mod:`dmlimits.build.slides`)
calls these so that the decks look alike and the slide build's test can find each part: the
plan is a table of class ``lecture-plan`` whose minutes add to :data:`LECTURE_MINUTES`, and a
demo's output sits in a block of class ``lecture-demo`` beside the command that made it.
"""

from __future__ import annotations

import base64
import html
import io
import re
import shlex
import subprocess
import sys

import matplotlib.pyplot as plt
from IPython.display import HTML

from dmlimits import search
from dmlimits.book.glue import sci

#: The length of one lecture of the course (minutes), the sum every plan must reach.
LECTURE_MINUTES = 50
#: The resolution of a figure on a slide (dots per inch): sharp on a projector.
FIGURE_DPI = 110


def plan(parts: list[tuple[str, int]]) -> HTML:
    """The lecture's timed plan: each part and its minutes, as a table with their total.
    Raises ``ValueError`` unless the minutes are whole, positive and add to
    :data:`LECTURE_MINUTES`."""
    for name, minutes in parts:
        if not isinstance(minutes, int) or minutes <= 0:
            raise ValueError(
                f"plan part {name!r}: minutes {minutes!r}; expected a whole number > 0")
    total = sum(m for _, m in parts)
    if total != LECTURE_MINUTES:
        raise ValueError(f"plan: the parts add to {total} minutes; expected {LECTURE_MINUTES}")
    rows = "".join(f'<tr><td>{html.escape(n)}</td><td class="minutes">{m}</td></tr>'
                   for n, m in parts)
    return HTML(f'<table class="lecture-plan"><thead><tr><th>Part</th><th>Minutes</th></tr>'
                f'</thead><tbody>{rows}</tbody><tfoot><tr><th>Total</th>'
                f'<th class="total">{total}</th></tr></tfoot></table>')


def figure(fig, alt: str) -> HTML:
    """A chapter's figure (a Matplotlib figure from :mod:`dmlimits.book.figures` and its
    siblings) as a PNG image with ``alt`` as its text for readers who cannot see it; the figure
    is closed.  Raises ``ValueError`` when ``alt`` is shorter than five words."""
    if len(alt.split()) < 5:
        raise ValueError(
            f"figure alt text {alt!r}: expected five words or more saying what it shows")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return HTML(f'<img class="lecture-figure" alt="{html.escape(alt)}" '
                f'src="data:image/png;base64,{data}">')


def demo(*args: str) -> HTML:
    """Run ``python -m dmlimits ARGS`` (the book's command line, e.g. ``headline --set
    training.months=6``) and show the command with what it printed.  Raises
    ``RuntimeError`` with the command's error output when it fails."""
    command = [sys.executable, "-m", "dmlimits", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"python -m dmlimits {shlex.join(args)}: exit {done.returncode}; "
                           f"expected 0 ({done.stderr.strip()[-300:]})")
    return output(f"$ python -m dmlimits {shlex.join(args)}", done.stdout)


def output(heading: str, text: str) -> HTML:
    """A demo's result (``text``, printed as it is) under ``heading``, in a ``lecture-demo``
    block."""
    if not text.strip():
        raise ValueError(f"demo {heading!r}: no output; expected what it printed")
    return HTML(f'<div class="lecture-demo"><p><code>{html.escape(heading)}</code></p>'
                f'<pre>{html.escape(text.rstrip())}</pre></div>')


def settings(scn) -> list[str]:
    """A scenario's overrides as the command line's ``--set KEY=VALUE`` arguments, so that a
    demo runs the variant the library made (e.g. one of :mod:`dmlimits.search.whatif`'s)."""
    args: list[str] = []
    for key, value in dict(scn.overrides).items():
        args += ["--set", f"{key}={value!r}" if isinstance(value, float) else f"{key}={value}"]
    if not args:
        raise ValueError(f"scenario {scn.name!r}: no overrides; expected a variant of a preset")
    return args


#: The headline numbers a demo compares, with the words a slide gives them.
HEADLINE_WORDS = {
    "linear_scaling_end_flop": "end of linear scaling (FLOP)",
    "last_feasible_flop": "latency wall: last feasible run (FLOP)",
    "plateau_utilization": "plateau utilization",
}


def compare(base, variant, values=None) -> HTML:
    """A demo through the scenario API: the headline numbers (:data:`HEADLINE_WORDS`) of
    ``base`` and of ``variant`` side by side; ``values`` (a function of a scenario returning a
    dict of named numbers) replaces the sweep's headline, e.g. the closed forms'."""
    get = values or search.headline
    a, b = get(base), get(variant)
    names = HEADLINE_WORDS if values is None else {k: k for k in a if isinstance(a[k], float)}
    width = max(len(w) for w in names.values())
    lines = [f"{'':{width}}  {'as the book':>14}  changed"]
    for key, words in names.items():
        lines.append(f"{words:{width}}  {sci(a[key]):>14}  {sci(b[key])}")
    changed = ", ".join(f"{k} = {sci(v)}" if isinstance(v, float) else f"{k} = {v}"
                        for k, v in dict(variant.overrides).items())
    return output(f"changed: {changed}", "\n".join(lines))


#: A cross-reference role of the chapters' MyST (``{eq}`label```, ``{ref}`...```), which a
#: slide cannot resolve: it is read as the words :data:`REFERENCE_WORDS`.
ROLE = re.compile(r"\{(eq|ref|numref|doc)\}`[^`]*`")
#: MyST's inline math role (``{math}`x```), which a slide writes as ``$x$`` for MathJax.
MATH_ROLE = re.compile(r"\{math\}`([^`]*)`")
#: What a slide says in place of a chapter's cross-reference.
REFERENCE_WORDS = "the chapter's earlier result"


def derivation(d) -> HTML:
    """A chapter's :class:`~dmlimits.core.derivation.Derivation` on a slide: its title, then
    each step's sentence and its equation as display math (the chapter's MyST roles, which a
    deck cannot resolve, read as :data:`REFERENCE_WORDS`)."""
    parts = [f"<p><strong>{html.escape(d.title)}</strong></p>"]
    for step in d.steps:
        text = step.text
        if step.using is not None:
            text += f" ({step.using.kind}: {step.using.name})"
        text = MATH_ROLE.sub(r"$\1$", ROLE.sub(REFERENCE_WORDS, text))
        parts.append(f"<p>{html.escape(text)}</p>")
        parts.append(f"<p>$$ {html.escape(step.latex())} $$</p>")
    return HTML(f'<div class="lecture-derivation">{"".join(parts)}</div>')
