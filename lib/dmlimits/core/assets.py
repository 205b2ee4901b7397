"""Files the site serves that the library does not compute: the charting library of the
interactive figures, pinned, and the widgets' own scripts and style sheet.

The pin lives here, below every layer that names it: the book's pages link the files
(:mod:`dmlimits.book.interactive`), the build fetches and checks the charting library
(:mod:`dmlimits.build.vendor`) and copies everything into the site's ``_static``
(:mod:`dmlimits.build.sphinxext`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Vendored:
    """One file of an npm package, pinned: the package, its version, the file inside the
    tarball (``package/<member>``), its registry integrity (SHA-512) and the name it gets in the
    site's ``_static/vendor``."""

    package: str
    version: str
    member: str
    integrity: str
    file_name: str


#: plotly.js's basic bundle (scatter, bar and pie traces; about 1.2 MB against the full bundle's
#: 4.8 MB, which would not leave the explorer under its 5 MB page weight), MIT licence.
PLOTLY = Vendored(
    package="plotly.js-basic-dist-min",
    version="4.1.1",
    member="plotly-basic.min.js",
    integrity=(
        "sha512-1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ=="
    ),
    file_name="plotly-basic-4.1.1.min.js",
)

#: The folder of the widgets' own files (``lib/dmlimits/static``).
STATIC = Path(__file__).resolve().parent.parent / "static"
#: The widgets' own files, copied into the site's ``_static/dmlimits``.
STATIC_FILES = ("widget.js", "explorer.js", "widgets.css")
