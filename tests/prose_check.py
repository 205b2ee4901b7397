r"""Find numbers typed by hand in the book's prose and captions.

Every number a reader sees in running text must be glued from the library (or quoted from the
published-values file through glue).  This scanner reads the Markdown sources (the notebooks'
Markdown cells and the pages of ``book/``) after removing what is not prose:

* code: fenced code blocks, executable cells, inline code;
* mathematics: ``$...$``, ``$$...$$`` and ``{math}`` blocks (formulas hold definitional constants;
  derived values inside math are glued with ``{glue}``);
* roles and references: ``{glue:text}`key```, ``{cite}`...```, ``{eq}`...```, link targets,
  labels ``(name)=``, directive options (``:label: ...``), front matter and HTML comments.

What is left is prose, including figure captions and admonitions.  A number in it is an error
unless the allow-list below accepts it.

The allow-list (documented, short):

* years from 1900 to 2099 (citations, dates);
* numbers right after a reference word: Section, Sections, §, Table, Figure, Fig., Eq.,
  Equation, Chapter, Appendix, Exercise, Step, Part, Week, version, Python;
* the markers of numbered lists (``1.`` at the start of a line);
* arXiv identifiers (``2411.01137``).

Digits that are part of a name (H100, 1F1B, 2D, ZeRO-1, bf16) are not numbers.  Definitional
counts ("two weight matrices", "one expert") are written as words.

Three more kinds are caught (issue #13): numbers inside inline math that are measurements rather
than a formula's small definitional constants (a decimal such as ``$0.7$``, a percentage such
as ``$38\%$``, a number of three or more digits); a number with its unit attached (``900GB/s``,
``3x``, ``40%``); and quantities written in words ("about a thousand GPUs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE_FENCE = re.compile(  # also indented, as inside list items
    r"^[ \t]*(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\n]*)\n(?P<body>.*?)^[ \t]*(?P=fence)\s*$",
    re.S | re.M,
)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
INLINE_MATH = re.compile(r"(?<!\\)\$[^$\n]+?(?<!\\)\$")
ROLE = re.compile(r"\{[\w:.-]+\}`[^`]*`")
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
LABEL = re.compile(r"^\([\w:.-]+\)=\s*$", re.M)
OPTION = re.compile(r"^\s*:[\w-]+:.*$", re.M)
DIRECTIVE_LINE = re.compile(r"^\s*(:{3,}|`{3,})\{[\w:.-]+\}.*$", re.M)
URL = re.compile(r"https?://\S+")
LIST_MARKER = re.compile(r"^\s*\d+\.(?=\s)", re.M)

MATH_NUMBER = re.compile(r"(?<![\w.^_{])(\d+\.\d+|\d+\s*\\%|\d{3,})(?![\w}])")
UNIT_NUMBER = re.compile(
    r"(?<![\w.\-/])\d+(?:\.\d+)?(?:[kMGTP]?B/s|[kMGTP]i?B|[kMG]?Hz|x|×|%|ms|µs|us|ns)(?![\w/])"
)
WORD_NUMBER = re.compile(r"\b(hundreds?|thousands?|millions?|billions?|trillions?|dozens?)\b", re.I)
NUMBER = re.compile(r"(?<![\w.\-/\\^_])[-+]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
REFERENCE_WORDS = (
    "section",
    "sections",
    "§",
    "table",
    "figure",
    "fig.",
    "eq.",
    "equation",
    "chapter",
    "appendix",
    "exercise",
    "step",
    "part",
    "week",  # the weeks of the course page
    "version",
    "python",
    "gtx",  # a product name: the GTX 580
    "llama",  # a product name: Llama 2
)
ARXIV = re.compile(r"^\d{4}\.\d{4,5}$")

# Code fences whose content is not prose (everything else: directives with prose content).
NON_PROSE_FENCES = ("{code-cell}", "{math}", "{bibliography}", "{tableofcontents}", "")
PLAIN_LANGUAGES = ("bash", "python", "yaml", "text", "console", "sh", "toml", "ini", "json")


@dataclass(frozen=True)
class Finding:
    line: int
    number: str
    context: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.number!r} in {self.context!r}"


def _blank(match: re.Match) -> str:
    """Replace a match by blanks, keeping its newlines (so line numbers stay right)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose_only(markdown: str) -> str:
    text = FRONT_MATTER.sub(_blank, markdown)
    text = COMMENT.sub(_blank, text)

    def fence(m: re.Match) -> str:
        info = m.group("info").strip()
        head = info.split()[0] if info else ""
        if head in NON_PROSE_FENCES or head in PLAIN_LANGUAGES or not head.startswith("{"):
            return _blank(m)
        # A directive with prose content (figure caption, admonition): keep the body only,
        # and the newlines of the closing fence and of the blank lines its match swallows, so
        # that line numbers stay right.
        head = m.group(0).split("\n", 1)[0]
        tail = m.group(0)[m.end("body") - m.start() :]
        return " " * len(head) + "\n" + m.group("body") + re.sub(r"[^\n]", " ", tail)

    text = CODE_FENCE.sub(fence, text)
    for pattern in (
        DISPLAY_MATH,
        ROLE,
        INLINE_MATH,
        INLINE_CODE,
        LINK_TARGET,
        LABEL,
        OPTION,
        DIRECTIVE_LINE,
        URL,
        LIST_MARKER,
    ):
        text = pattern.sub(_blank, text)
    return text


def _allowed(number: str, before: str) -> bool:
    digits = number.lstrip("+-")
    if re.fullmatch(r"(19|20)\d\d", digits):
        return True
    if ARXIV.match(digits):
        return True
    words = before.lower().split()
    return bool(words) and words[-1] in REFERENCE_WORDS


def _math_numbers(markdown: str) -> list[Finding]:
    """Measurements typed inside inline math (see the module's docstring)."""
    text = FRONT_MATTER.sub(_blank, markdown)
    text = CODE_FENCE.sub(_blank, text)
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for math in INLINE_MATH.finditer(line):
            body = math.group(0)[1:-1]
            for m in MATH_NUMBER.finditer(body):
                out.append(Finding(lineno, m.group(0), line.strip()[:80]))
    return out


def hand_typed_numbers(markdown: str) -> list[Finding]:
    """Every number in the prose of ``markdown`` that is not glued and not allowed."""
    text = prose_only(markdown)
    original = markdown.splitlines()
    findings = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for m in NUMBER.finditer(line):
            if not _allowed(m.group(0), line[: m.start()]):
                findings.append(Finding(lineno, m.group(0), line.strip()[:80]))
        for m in UNIT_NUMBER.finditer(line):
            findings.append(Finding(lineno, m.group(0), line.strip()[:80]))
        for m in WORD_NUMBER.finditer(line):
            # "{glue:text}`x` million weights": the scale word of a glued number.
            if original[lineno - 1][: m.start()].rstrip().endswith("`"):
                continue
            findings.append(Finding(lineno, m.group(0), line.strip()[:80]))
    return findings + _math_numbers(markdown)
