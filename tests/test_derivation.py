"""Derivations: every one verifies; a broken step is caught and named."""

import itertools
import json
import re

import pytest
import sympy as sp
from conftest import EXECUTED, derivation_called, derivation_names, every_derivation
from dmlimits import premises
from dmlimits.core import symbols as s
from dmlimits.core.derivation import Derivation, DerivationError, Step, Substitution, derivation
from dmlimits.costs import model

# make check (--dist loadgroup) runs the tests that build every derivation on one worker: the
# other builds none (see conftest.derivation_names).
pytestmark = pytest.mark.xdist_group("derivations")


def test_there_are_derivations_in_every_module():
    chapters = {d.chapter for d in every_derivation()}
    assert {"model", "matmul"} <= chapters


@pytest.mark.parametrize("name", derivation_names())
def test_every_derivation_verifies(name: str):
    d = derivation_called(name)
    d.verify()
    assert len(d.steps) >= 2


def test_names_are_unique():
    names = [d.name for d in every_derivation()]
    assert len(names) == len(set(names))


def _broken(index: int, new_expr) -> Derivation:
    return model.compute_from_width().with_step(index, new_expr)


def test_a_readers_step_is_checked_both_ways():
    """The derivation exercises: a reader's own step verifies when it is the book's step
    written another way, and fails naming the link when it is not."""
    d = model.compute_from_width()
    rewritten = sp.Eq(d.steps[4].expr.lhs, sp.expand(d.steps[4].expr.rhs))
    assert d.with_step(5, rewritten).verify().steps[4].expr == rewritten
    wrong = sp.Eq(d.steps[4].expr.lhs, 3 * d.steps[4].expr.rhs)
    with pytest.raises(DerivationError, match=r"step (5|6)"):
        d.with_step(5, wrong).verify()
    with pytest.raises(ValueError, match=r"no step 0; expected a whole number from 1 to"):
        d.with_step(0, rewritten)
    for bad in ("d_model", True, 3):
        with pytest.raises(TypeError, match=r"step 5 must be a sympy expression or equation"):
            d.with_step(5, bad)


def test_a_wrong_rewrite_is_named():
    d = model.compute_from_width()
    wrong = sp.Eq(s.compute, d.result.rhs * 2)
    with pytest.raises(DerivationError, match=r"model-compute-width: step 5 \('Collecting"):
        _broken(5, wrong).verify()


def test_a_wrong_substitution_is_named():
    d = model.compute_from_width()
    wrong = sp.Eq(s.compute, d.steps[1].expr.rhs * s.n_layers)
    with pytest.raises(DerivationError, match=r"step 2 .*substituting"):
        _broken(2, wrong).verify()


def test_a_wrong_solution_is_named():
    d = model.width_from_compute_dense()
    last = d.steps[-1]
    bad = Step(last.text, sp.Eq(s.d_model, last.expr.rhs * 2), solve_for=s.d_model)
    broken = derivation(d.name, d.title, [*d.steps[:-1], bad])
    with pytest.raises(DerivationError, match=rf"step {len(d.steps)} .*does not solve"):
        broken.verify()


def test_an_unregistered_symbol_is_refused():
    x = sp.Symbol("x_unregistered", positive=True)
    d = derivation(
        "test-unregistered", "t", [Step("a", sp.Eq(x, s.compute)), Step("b", sp.Eq(x, s.compute))]
    )
    with pytest.raises(DerivationError, match="unregistered symbols x_unregistered"):
        d.verify()


def test_a_boolean_is_not_a_step():
    with pytest.raises(TypeError, match="evaluated to a boolean"):
        Step("trivial", sp.Eq(s.compute, s.compute))


def test_substitution_kind_is_checked():
    with pytest.raises(ValueError, match="kind"):
        Substitution("bad", {s.d_ff: s.d_model}, kind="guess")


def test_scaled_equations_are_the_same_relation():
    a = sp.Eq(s.compute, 6 * s.n_params)
    b = sp.Eq(2 * s.compute, 12 * s.n_params)
    derivation("test-scaled", "t", [Step("a", a), Step("b", b)]).verify()


def test_the_numeric_precheck_rejects_only_what_is_not_the_same():
    """derivation.differs spares the symbolic attempts that would fail: it says two
    expressions differ only where they do (every step of every derivation is the same as the
    one before, by the symbolic proof, and the pre-check never says otherwise), and says
    nothing of what it cannot evaluate."""
    from dmlimits.core.derivation import differs, residual_of

    for d in every_derivation():
        for prev, step in zip(d.steps, d.steps[1:], strict=False):
            if step.solve_for is not None:
                continue
            before = step.using.apply(prev.expr) if step.using else prev.expr
            a, b = residual_of(before), residual_of(step.expr)
            assert not differs(a, b, scaled=isinstance(step.expr, sp.Equality)), (d.name, step)
    # Different relations, and equal ones written otherwise, at the same points.
    assert differs(6 * s.n_params, 6 * s.n_params + s.d_model, scaled=False)
    assert differs(s.compute - 6 * s.n_params, s.compute - 2 * s.n_params, scaled=True)
    assert not differs(s.compute - 6 * s.n_params, 12 * s.n_params - 2 * s.compute, scaled=True)
    assert not differs(
        sp.log(s.d_model * s.d_ff), sp.log(s.d_model) + sp.log(s.d_ff), scaled=False
    )
    # A function it cannot evaluate: no verdict, the symbolic proof decides.
    f = sp.Function("f")
    assert not differs(f(s.d_model), f(s.d_model) + 1, scaled=False)


def test_markdown_has_one_numbered_equation_per_step():
    d = model.compute_of_a_run()
    md = d.markdown()
    labels = re.findall(r":label: (\S+)", md)
    assert labels == [d.label(i) for i in range(1, len(d.steps) + 1)]
    for step in d.steps:
        assert step.text in md


def test_a_long_substitution_is_displayed_not_inline():
    """A substitution too wide for a line of text is displayed below its sentence, one
    unnumbered equation a replacement (MathJax cannot break inline math, and the page clips
    what overflows); a short one stays inline.  Both keep the step's own numbered equation."""
    from dmlimits.core.derivation import INLINE_WIDTH
    from dmlimits.core.printing import visible_width

    short = Substitution("short", {s.d_ff: 4 * s.d_model})
    long = Substitution(
        "long", {s.d_ff: sum(s.d_model**k * s.n_layers ** (k - 1) for k in range(1, 12))}
    )
    assert visible_width(short.latex()) <= INLINE_WIDTH < visible_width(long.latex())
    start = sp.Eq(s.n_params, s.n_layers * s.d_model * s.d_ff)
    for sub, inline in ((short, True), (long, False)):
        d = derivation("test-wide", "t", [Step("a", start), Step("b", sub.apply(start),
                                                                 using=sub)])  # fmt: skip
        md = d.verify().markdown()
        assert (f"${sub.latex()}$" in md) is inline
        assert md.count(":label: ") == 2
        assert md.count("```{math}") == (2 if inline else 3)
        if not inline:
            assert "(*definition: long*):\n\n```{math}\n\\begin{aligned}" in md
    # Several replacements that each fit on a line are aligned on their equals signs.
    d, L = s.d_model, s.n_layers
    several = Substitution(
        "several",
        {s.d_ff: 4 * d * L + 3 * L**2 + 5 * d, s.compute: 6 * s.n_params * d + 7 * L**3,
         s.batch: 9 * d**2 + 2 * L * s.d_ff},
    )  # fmt: skip
    assert visible_width(several.latex()) > INLINE_WIDTH
    aligned = derivation("test-wide", "t", [Step("a", start), Step("b", several.apply(start),
                                                                   using=several)])  # fmt: skip
    md = aligned.verify().markdown()
    assert md.count(" &= ") == 3 and "\\\\\nC &= 7 L^{3}" in md


def test_the_book_renders_the_objects_the_tests_check(built_book):
    """Each derivation shown in the chapter is, byte for byte, the library's markdown."""
    nb = json.loads((EXECUTED / "model.ipynb").read_text())
    shown = set()
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown")
            if text:
                shown.add("".join(text) if isinstance(text, list) else text)
    chapter = [d for d in every_derivation() if d.chapter == "model"]
    assert chapter
    for d in chapter:
        assert d.markdown() in shown, f"{d.name} is not rendered as the library builds it"


@pytest.mark.slow  # every derivation is also verified in-process, one test each, above
def test_cli_lists_and_verifies(capsys):
    """The command as a reader runs it, every derivation proved and every premise checked; in
    this process, without a second interpreter's start-up (``python -m dmlimits`` itself is
    run by the other command tests)."""
    from dmlimits import cli

    assert cli.main(["derivations", "--verify"]) == 0
    stdout = capsys.readouterr().out
    for d in every_derivation():
        k, n = len(d.steps) - 1, len(premises.premises(d))
        assert re.search(
            rf"^{re.escape(d.name)}\s+{len(d.steps)} steps\s+{k} steps? proved; {n} premises?: "
            rf"\d+ derived, \d+ checked \((simulation|hand count|published value): .+\)$",
            stdout,
            re.M,
        ), d.name
    assert "every premise derived or checked" in stdout


def test_cli_exits_non_zero_when_a_derivation_fails(capsys, monkeypatch):
    from dmlimits import cli
    from dmlimits.core.derivation import builders

    def broken():
        return derivation(
            "test-broken", "t", [Step("a", sp.Eq(s.compute, 1)), Step("b", sp.Eq(s.compute, 2))]
        )

    # One good derivation beside the broken one: the command's verdict, not every derivation.
    good = next(iter(builders().items()))
    monkeypatch.setattr(
        "dmlimits.core.derivation._BUILDERS", dict([good, ("tests.broken", broken)])
    )
    assert cli.main(["derivations", "--verify"]) == 1
    out = capsys.readouterr().out
    assert "test-broken" in out and "FAILED" in out and "1 failed" in out


@pytest.mark.slow
def test_substitution_replace_equals_apply():
    """The fast replacement used before lambdifying gives the same expression as subs."""
    from dmlimits.costs import matmul

    for kind in matmul.KINDS:
        expr = matmul.cost_expressions(kind, False)["total"]
        fast = matmul.CONSTANTS.replace(expr)
        slow = matmul.CONSTANTS.apply(expr)
        assert fast.free_symbols == slow.free_symbols
        # Numbers put in for every symbol (xreplace: evalf(subs=...) took seconds a kind).
        point = {
            x: sp.Float(1.0 + 0.37 * i) for i, x in enumerate(sorted(fast.free_symbols, key=str))
        }
        assert float(fast.xreplace(point)) == pytest.approx(float(slow.xreplace(point)))


def test_a_replacement_that_skips_min_max_comparisons_is_the_same_function():
    """``compare_min_max=False`` leaves a Min or Max of what was put in as it is (sympy would
    drop the arguments it can compare) and computes the same values."""
    x, y = sp.symbols("x y", positive=True)
    three = Substitution("x is three", {x: sp.Integer(3)})
    expr = sp.Max(x, 2) + sp.Min(x * y, y) + y**2
    compared = three.replace(expr)
    assert compared == 3 + y + y**2
    kept = three.replace(expr, compare_min_max=False)
    assert kept.has(sp.Max(3, 2, evaluate=False)) and kept.has(sp.Min(3 * y, y, evaluate=False))
    for value in (0.25, 1.0, 7.5):
        assert sp.lambdify(y, kept)(value) == sp.lambdify(y, compared)(value)
    untouched = sp.Max(y, 2)
    assert three.replace(untouched, compare_min_max=False) is untouched


def test_every_equation_reference_in_a_derivation_exists():
    """A {eq} reference in a step's sentence or a substitution's name names a real label."""
    import re

    labels = {d.label(i) for d in every_derivation() for i in range(1, len(d.steps) + 1)}
    for d in every_derivation():
        texts = [s.text for s in d.steps] + [s.using.name for s in d.steps if s.using]
        for ref in re.findall(r"\{eq\}`([^`]+)`", " ".join(texts)):
            assert ref in labels, f"{d.name}: {{eq}}`{ref}` is not a label"


def test_no_step_prints_the_same_as_the_one_before():
    """Issue #13: a step that repeats its predecessor shows the reader nothing."""
    repeated = [
        f"{d.name}-{i}"
        for d in every_derivation()
        for i in range(2, len(d.steps) + 1)
        if d.steps[i - 1].latex() == d.steps[i - 2].latex()
    ]
    assert not repeated, repeated


def test_display_equations_fit_the_column():
    """Every step's display math is at most printing.MAX_WIDTH wide on each line (the browser
    test measures the typeset width; this is the fast check)."""
    from dmlimits.core import printing

    wide = []
    for d in every_derivation():
        for i, st in enumerate(d.steps, 1):
            tex = st.latex()
            body = tex.removeprefix("\\begin{aligned}\n").removesuffix("\n\\end{aligned}")
            for line in body.split(" \\\\\n"):
                if printing.visible_width(line) > printing.MAX_WIDTH + 4:
                    wide.append((f"{d.name}-{i}", printing.visible_width(line)))
    assert not wide, wide


def test_a_broken_line_starts_with_its_operator():
    """Where a display breaks a sum, the next line starts with the sign that joins it (a lost
    sign turns a sum into a product): expert parallelism's (7.22) read ``1 - \\delta`` over
    ``\\frac{\\delta - 1}{N}(N - 1)``, its ``+`` gone, when a negative term was broken."""
    bare = []
    for d in every_derivation():
        for i, st in enumerate(d.steps, 1):
            tex = st.latex()
            if not tex.startswith("\\begin{aligned}"):
                continue
            lines = tex.split("\n")[1:-1]
            for before, line in itertools.pairwise(lines):
                body = line.removeprefix("&\\quad ").removeprefix("&= ").lstrip("& ")
                if not (body[:1] in "+-" or before.rstrip(" \\").endswith(",")
                        or line.startswith("&= ")):  # fmt: skip
                    bare.append((f"{d.name}-{i}", line[:60]))
    assert not bare, bare


# --- Reasons typeset, one meaning per symbol (issue #13) ----------------------------------------
_MATH = re.compile(r"\$[^$]*\$|\{eq\}`[^`]*`|\{[a-z]+\}`[^`]*`|`[^`]*`")
_UNITS = re.compile(r"\b(FLOP|bytes|GB|TB|B)/s\b|\b\d+-bit\b")
_ASCII_MATH = (
    r"\b[A-Za-z]+_[A-Za-z0-9,{}]+",  # an identifier with an underscore: d_model, N_TP,ff
    r"\b\w+\s*(=|/|\^|<|>)\s*\w+",  # a = b, x / y, 2^i, p > 1
    r"\(\s*\w+\s*[-+]\s*\w+\s*\)",  # (p - 1)
    r"\b\w\s+x\s+\w\b",  # a x b for a times b
)


def ascii_math(text: str) -> list[str]:
    """Math written as plain text outside MyST's inline math and roles."""
    bare = _UNITS.sub(" ", _MATH.sub(" ", text))
    return [m.group(0) for p in _ASCII_MATH for m in re.finditer(p, bare)]


def _reasons():
    for d in every_derivation():
        for i, step in enumerate(d.steps, start=1):
            yield f"{d.name}-{i}", step.text
            if step.using is not None:
                yield f"{d.name}-{i} ({step.using.kind})", step.using.name


def test_the_ascii_math_check_can_fail():
    assert ascii_math("each GPU's d_ff / N_TP,ff hidden units") == [
        "d_ff",
        "N_TP,ff",
        "d_ff / N_TP",
    ]
    assert ascii_math("a fraction 2 (p - 1) / p") and ascii_math("an a x a shard")
    assert ascii_math("paid only when p > 1")
    assert not ascii_math("a fraction $2 (p - 1) / p$, derated FLOP/s over bytes/s (16-bit)")


def test_step_reasons_are_typeset_not_ascii():
    found = {where: hits for where, text in _reasons() if (hits := ascii_math(text))}
    assert not found, f"reasons with math written as plain text: {found}"


def test_reason_math_uses_the_registrys_notation():
    """Every subscripted symbol typeset in a reason is one the registry declares, so a reason
    writes a symbol as its equations do."""
    from dmlimits.core.symbols import REGISTRY

    known = {info.latex for info in REGISTRY}
    token = re.compile(r"\\?[A-Za-z]+_\{(?:[^{}]|\{[^{}]*\})*\}")
    unknown = {}
    for where, text in _reasons():
        for math in re.findall(r"\$([^$]*)\$", text):
            for t in token.findall(math):
                if t not in known:
                    unknown.setdefault(where, []).append(t)
    assert not unknown, f"symbols in reasons that the registry does not declare: {unknown}"


def test_a_notation_has_one_meaning_in_the_whole_book():
    from dmlimits.core.symbols import REGISTRY, Registry

    seen = {}
    for info in REGISTRY:
        assert info.latex not in seen, (info.symbol, seen.get(info.latex))
        seen[info.latex] = info.symbol
    fresh = Registry()
    fresh.declare("x_a", "x", "one thing", defined_in="a")
    with pytest.raises(ValueError, match=r"notation \$x\$ already means 'one thing'"):
        fresh.declare("x_b", "x", "another thing", defined_in="b")


def _denominators(tex: str) -> list[str]:
    """The denominators of every ``\\frac`` in ``tex``, read by matching braces."""
    out = []
    i = tex.find(r"\frac{")
    while i >= 0:
        k, parts = i + len(r"\frac"), []
        for _ in range(2):
            depth, start = 0, k
            while True:
                depth += {"{": 1, "}": -1}.get(tex[k], 0)
                k += 1
                if depth == 0:
                    break
            parts.append(tex[start + 1 : k - 1])
        out.append(parts[1])
        i = tex.find(r"\frac{", i + 1)
    return out


def test_no_fraction_inside_a_denominator():
    from dmlimits.core.symbols import REGISTRY

    nested = [
        f"{d.name}-{i}"
        for d in every_derivation()
        for i, step in enumerate(d.steps, start=1)
        if any(r"\frac" in den for den in _denominators(REGISTRY.latex(step.expr)))
    ]
    assert not nested, f"fractions inside a denominator: {nested}"
    assert _denominators(r"\frac{a}{\frac{b}{c}}") == [r"\frac{b}{c}", "c"]


def test_every_step_is_an_equation_with_a_left_hand_side():
    """No numbered equation is a bare expression or a lone 0 (issue #13)."""
    bare = [
        f"{d.name}-{i}"
        for d in every_derivation()
        for i, step in enumerate(d.steps, start=1)
        if not isinstance(step.expr, sp.Equality) or step.expr.lhs == 0
    ]
    assert not bare, f"steps without a left-hand side: {bare}"


def test_a_derivation_is_found_by_its_name():
    """What a premise cites is looked up by name, building as few derivations as it can: each
    name gives the derivation every builder makes, and an unknown name none."""
    from dmlimits.core.derivation import derivation_named

    for d in every_derivation():
        found = derivation_named(d.name)
        assert found is not None and found.name == d.name and found.steps == d.steps, d.name
    assert derivation_named("no-such-derivation") is None


def test_a_proof_is_kept_only_for_the_same_derivation_and_registry():
    """verify() proves a derivation once a process against the library's registry; a changed
    step or another registry is proved afresh."""
    from dmlimits.core.symbols import Registry

    d = model.depth_from_compute()
    assert d.verify() is d
    assert d.__dict__.get("_proved")
    assert d.verify() is d  # kept
    with pytest.raises(DerivationError, match="unregistered symbols"):
        d.verify(Registry())  # another registry: checked again
    last = len(d.steps)
    wrong = d.with_step(last, sp.Eq(d.steps[-1].expr.lhs, 2 * d.steps[-1].expr.rhs))
    assert not wrong.__dict__.get("_proved")
    with pytest.raises(DerivationError, match=f"step {last}"):
        wrong.verify()


def test_a_substitution_its_sentence_names_is_not_named_again():
    """"Each token uses one expert per block. (*definition: each token uses one expert per
    block*, ...)" said one thing twice: only what the name adds to the sentence is printed."""
    start = sp.Eq(s.n_params, s.n_layers * s.d_model * s.d_ff)
    same_name = Substitution("four times wider", {s.d_ff: 4 * s.d_model})
    more = Substitution("four times wider: the usual ratio", {s.d_ff: 4 * s.d_model})
    other = Substitution("the usual ratio", {s.d_ff: 4 * s.d_model})
    for sub, shown in ((same_name, "(*definition*, $"),
                       (more, "(*definition: the usual ratio*, $"),
                       (other, "(*definition: the usual ratio*, $")):  # fmt: skip
        d = derivation("test-named", "t", [Step("a", start),
                                           Step("Four times wider.", sub.apply(start), using=sub)])
        md = d.verify().markdown()
        assert shown in md, md
        assert md.lower().count("four times wider") == 1
