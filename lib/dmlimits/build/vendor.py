"""The charting library of the book's interactive figures, brought from the npm registry at a
pinned version and copied into the site, so that no page fetches anything at read time.

The pin (:data:`dmlimits.core.assets.PLOTLY`: the package, its version, the file inside
its tarball and the tarball's SHA-512 integrity as the registry publishes it) lives in the
core; this module downloads the tarball once into the environment
(``<sys.prefix>/share/dmlimits``, beside the installed packages, so ``make clean`` keeps it and a
new environment fetches it anew), checks its integrity and extracts the one file.
``make book`` runs it as part of the set-up (``python -m dmlimits.build.vendor``); the build
calls :func:`plotly_file` again when it copies the file into the site, which reads the kept file
and downloads it only into an environment set up without it (so a build of a new environment
needs the registry once).
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

from dmlimits.core.assets import PLOTLY, Vendored
from dmlimits.core.plumbing import atomic_write

#: The npm registry's address (the only one the project's machines reach besides PyPI and
#: Debian's).
REGISTRY = "https://registry.npmjs.org"


def vendor_folder() -> Path:
    """Where vendored files are kept: in the environment, beside its packages."""
    return Path(sys.prefix) / "share" / "dmlimits"


def tarball_url(pin: Vendored) -> str:
    """Where the registry keeps ``pin``'s tarball (``<name>/-/<base>-<version>.tgz``)."""
    base = pin.package.rsplit("/", 1)[-1]
    return f"{REGISTRY}/{pin.package}/-/{base}-{pin.version}.tgz"


def check_integrity(pin: Vendored, data: bytes) -> None:
    """Raise ``ValueError`` unless ``data`` has ``pin``'s SHA-512 integrity (npm's
    ``sha512-<base64>`` form)."""
    got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if got != pin.integrity:
        raise ValueError(
            f"{pin.package}@{pin.version}: integrity {got[:24]}...; "
            f"expected {pin.integrity[:24]}..."
        )


def extract(pin: Vendored, tarball: bytes) -> bytes:
    """The bytes of ``pin.member`` inside the npm tarball ``tarball`` (after its integrity)."""
    check_integrity(pin, tarball)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        try:
            member = tar.extractfile(f"package/{pin.member}")
        except KeyError:
            member = None
        if member is None:
            raise ValueError(f"{pin.package}@{pin.version}: no file package/{pin.member}")
        return member.read()


def fetch(pin: Vendored, folder: Path | None = None) -> Path:
    """The path of ``pin``'s file, downloaded, checked and kept first if it is not kept yet.
    Raises ``OSError`` naming the address when the registry cannot be reached."""
    path = (folder or vendor_folder()) / pin.file_name
    if path.is_file():
        return path
    url = tarball_url(pin)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            tarball = response.read()
    except OSError as e:
        raise OSError(f"{url}: could not download ({e}); expected the npm registry") from e
    atomic_write(path, extract(pin, tarball))
    path.chmod(0o644)  # the temporary file it was written as is private to its owner
    return path


def plotly_file() -> Path:
    """The vendored plotly.js file (:data:`~dmlimits.core.assets.PLOTLY`), fetched once."""
    return fetch(PLOTLY)


if __name__ == "__main__":
    print(f"vendored {plotly_file()}")
