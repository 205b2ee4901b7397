"""The registry of symbols: one place for every symbol the book's derivations use.

Each symbol is declared once, with its LaTeX, its meaning, its unit and the chapter that defines
it.  Derivations use these symbols only; the notation page is generated from this registry, and a
test checks that every symbol in every rendered derivation is registered.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from dmlimits.core import units as u
from dmlimits.core.printing import display, latex


@dataclass(frozen=True)
class SymbolInfo:
    symbol: sp.Symbol
    latex: str
    meaning: str
    unit: sp.Expr
    defined_in: str  # the chapter (document name) that introduces it

    @property
    def unit_text(self) -> str:
        return u.unit_text(self.unit)


class Registry:
    """Symbols by name; declaring the same name twice, or a notation another symbol of the book
    already uses, is an error (one meaning per symbol)."""

    def __init__(self) -> None:
        self._by_symbol: dict[sp.Symbol, SymbolInfo] = {}

    def declare(
        self,
        name: str,
        latex: str,
        meaning: str,
        unit: sp.Expr = u.one,
        *,
        defined_in: str,
        integer: bool = False,
        may_be_zero: bool = False,
    ) -> sp.Symbol:
        sign = {"nonnegative": True} if may_be_zero else {"positive": True}
        sym = sp.Symbol(name, integer=integer or None, **sign)
        if sym in self._by_symbol or any(s.name == name for s in self._by_symbol):
            raise ValueError(f"symbol {name!r} is declared twice")
        taken = next((i for i in self._by_symbol.values() if i.latex == latex), None)
        if taken is not None:  # one meaning per symbol in the whole book
            raise ValueError(
                f"symbol {name!r} ({meaning}): its notation ${latex}$ already means "
                f"{taken.meaning!r} ({taken.symbol.name}, chapter {taken.defined_in!r}); "
                "expected a notation no other symbol of the book uses"
            )
        self._by_symbol[sym] = SymbolInfo(sym, latex, meaning, sp.sympify(unit), defined_in)
        return sym

    def __contains__(self, sym: object) -> bool:
        return sym in self._by_symbol

    def __getitem__(self, sym: sp.Symbol) -> SymbolInfo:
        return self._by_symbol[sym]

    def __iter__(self):
        return iter(self._by_symbol.values())

    def __len__(self) -> int:
        return len(self._by_symbol)

    @property
    def units(self) -> dict[sp.Symbol, sp.Expr]:
        return {s: info.unit for s, info in self._by_symbol.items()}

    @property
    def latex_names(self) -> dict[sp.Symbol, str]:
        return {s: info.latex for s, info in self._by_symbol.items()}

    def unregistered(self, expr: sp.Basic) -> set[sp.Symbol]:
        """Free symbols of ``expr`` that this registry does not know."""
        return {s for s in expr.free_symbols if s not in self._by_symbol}

    def latex(self, expr: sp.Basic) -> str:
        """LaTeX of ``expr`` in the book's conventions (:mod:`dmlimits.core.printing`), every
        registered symbol in its declared notation."""
        return latex(expr, self.latex_names)

    def display(self, expr: sp.Basic) -> str:
        """``expr`` as display math that fits the text column
        (:func:`~dmlimits.core.printing.display`)."""
        return display(expr, self.latex_names)


REGISTRY = Registry()
_decl = REGISTRY.declare

# --- The model of training (chapter "model") -------------------------------------------------
_M = "model"
d_model = _decl(
    "d_model", r"d_{\mathrm{model}}", "model width: size of the residual stream", defined_in=_M
)
d_ff = _decl("d_ff", r"d_{\mathrm{ff}}", "hidden width of each expert's MLP", defined_in=_M)
ff_ratio = _decl(
    "r_ff", r"r_{\mathrm{ff}}", "ratio of hidden to model width, d_ff / d_model", defined_in=_M
)
n_layers = _decl("L", "L", "number of blocks (layers)", defined_in=_M)
n_experts = _decl("S", "S", "experts per block (sparsity); S = 1 is dense", defined_in=_M)
n_params = _decl("N", "N", "total parameters", defined_in=_M)
n_active = _decl("N_a", r"N_{\mathrm{a}}", "parameters active for one token, N / S", defined_in=_M)
n_tokens = _decl("D", "D", "training tokens", defined_in=_M)
tokens_per_param = _decl("k_D", "k_D", "training tokens per parameter (Chinchilla)", defined_in=_M)
compute = _decl("C", "C", "training compute", u.flop, defined_in=_M)
flop_per_mac = _decl(
    "c_MAC", r"c_{\mathrm{MAC}}", "FLOP per multiply-accumulate", u.flop, defined_in=_M
)
macs_per_param_token = _decl(
    "m_pass",
    r"m_{\mathrm{pass}}",
    "multiply-accumulates per active parameter per token, forward and backward",
    defined_in=_M,
)
depth_coef = _decl("a_L", "a_L", "coefficient of the depth law", defined_in=_M)
depth_exp = _decl("e_L", "e_L", "exponent of the depth law", defined_in=_M)
sparse_ref_experts = _decl(
    "S_ref", r"S_{\mathrm{ref}}", "experts at the reference width (sparsity law)", defined_in=_M
)
sparse_ref_width = _decl(
    "d_ref", r"d_{\mathrm{ref}}", "reference model width of the sparsity law", defined_in=_M
)
batch = _decl("B", "B", "global batch size in tokens", defined_in=_M)
batch_anchor = _decl("B_0", "B_0", "batch size at the anchor compute", defined_in=_M)
compute_anchor = _decl("C_0", "C_0", "anchor compute of the batch law", u.flop, defined_in=_M)
batch_exp = _decl("e_B", "e_B", "exponent of the batch law in compute", defined_in=_M)
deepseek_coef = _decl(
    "k_DS",
    r"k_{\mathrm{DS}}",
    "coefficient of the DeepSeek batch law (tokens at one FLOP)",
    defined_in=_M,
)
deepseek_exp = _decl(
    "e_DS", r"e_{\mathrm{DS}}", "exponent of the DeepSeek batch law", defined_in=_M
)
n_steps = _decl("n_steps", r"n_{\mathrm{steps}}", "optimizer steps, D / B", defined_in=_M)
train_time = _decl("T", "T", "wall-clock training time", u.second, defined_in=_M)
step_budget = _decl(
    "t_step",
    r"t_{\mathrm{step}}",
    "wall-clock time available for one step",
    u.second,
    defined_in=_M,
)
layer_budget = _decl(
    "t_layer", r"t_{\mathrm{layer}}", "time available per layer per step", u.second, defined_in=_M
)
peak_flops = _decl("F", "F", "peak 16-bit throughput of one GPU", u.flop / u.second, defined_in=_M)
eff_util = _decl(
    "eta", r"\eta", "effective utilization: the clock derate of long matmul runs", defined_in=_M
)
n_gpu = _decl("N_GPU", r"N_{\mathrm{GPU}}", "number of GPUs in the cluster", defined_in=_M)

# Exponents of each quantity against training compute: X grows as C^alpha_X.
alpha_width = _decl("alpha_d", r"\alpha_{d}", "exponent of d_model against compute", defined_in=_M)
alpha_depth = _decl("alpha_L", r"\alpha_{L}", "exponent of L against compute", defined_in=_M)
alpha_batch = _decl("alpha_B", r"\alpha_{B}", "exponent of B against compute", defined_in=_M)
alpha_steps = _decl(
    "alpha_n", r"\alpha_{n}", "exponent of the step count against compute", defined_in=_M
)
alpha_ratio = _decl("alpha", r"\alpha", "exponent of B / L against compute", defined_in=_M)


def info(sym: sp.Symbol) -> SymbolInfo:
    return REGISTRY[sym]
