"""Korean prose from a Debian package: LibreOffice's Korean help
(`libreoffice-help-ko`, MPL-2.0): of its 2,560 HTML pages, 1,941 hold two
Korean paragraphs or more: 22k paragraphs of plain polite Korean (-합니다),
0.9 M characters — seven times the demo's other prose.

Fetched once at install time (`make demo` runs `python -m kjax.text.debian_corpus`:
`apt-get download` + `dpkg-deb -x`, no root needed, nothing installed system-wide)
into the kjax cache; an `apt-get install libreoffice-help-ko` copy in
/usr/share is read as well. Reading the corpus never downloads: when neither
is there, the corpus name is a one-line error saying how to get it.

Each HTML page becomes one text file (one document), a paragraph (p, h1-6,
li, td) a line; paragraphs without Hangul (code, file names) are left out.
"""
from __future__ import annotations

import glob
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile

from kjax import paths
from kjax.errors import KjaxError

PACKAGE = "libreoffice-help-ko"
HELP_SUBDIR = os.path.join("usr", "share", "libreoffice", "help", "ko", "text")
SYSTEM_HELP = os.path.join(os.sep, HELP_SUBDIR)
HANGUL = re.compile("[가-힣]")
BLOCKS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td"})
SKIPPED = frozenset({"script", "style", "head", "header", "footer", "nav"})


def cache_dir() -> str:
    return os.path.join(paths.cache_root(), "corpora", PACKAGE)


class _Paragraphs(html.parser.HTMLParser):
    """The text of the block elements of one page, in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs, self._text, self._depth, self._skip = [], [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIPPED:
            self._skip += 1
        elif tag in BLOCKS:
            self._flush()
            self._depth += 1
        elif tag == "br":
            self._text.append(" ")

    def handle_endtag(self, tag):
        if tag in SKIPPED:
            self._skip = max(0, self._skip - 1)
        elif tag in BLOCKS:
            self._flush()
            self._depth = max(0, self._depth - 1)

    def handle_data(self, data):
        if self._depth and not self._skip:
            self._text.append(data)

    def _flush(self):
        text = " ".join("".join(self._text).split())
        self._text = []
        if len(text) >= 8 and HANGUL.search(text):
            self.paragraphs.append(text)


def page_paragraphs(html_text: str) -> list[str]:
    parser = _Paragraphs()
    parser.feed(html_text)
    parser.close()
    return parser.paragraphs


def _html_root() -> str | None:
    for root in (os.path.join(cache_dir(), "deb", HELP_SUBDIR), SYSTEM_HELP):
        if os.path.isdir(root):
            return root
    return None


def _convert(root: str, out_dir: str) -> None:
    """Every page under `root` → OUT_DIR/<area>/<page>.txt; a `done` file last."""
    pages = sorted(glob.glob(os.path.join(root, "**", "*.html"), recursive=True))
    for page in pages:
        lines = page_paragraphs(open(page, encoding="utf-8", errors="replace").read())
        if len(lines) >= 2:   # a document for NSP holds two sentences at least
            name = os.path.relpath(page, root)[:-5].replace(os.sep, "_") + ".txt"
            paths.write_text(os.path.join(out_dir, name), "\n".join(lines) + "\n")
    paths.write_text(os.path.join(out_dir, "done"), f"{len(pages)} pages from {root}\n")


def libreoffice_files() -> list[str]:
    """The converted pages (converted on first use from the fetched or
    system-installed HTML); a one-line error when neither is there."""
    out_dir = os.path.join(cache_dir(), "text")
    if not os.path.isfile(os.path.join(out_dir, "done")):
        root = _html_root()
        if root is None:
            raise KjaxError(f"corpus 'libreoffice-ko' needs Debian's {PACKAGE}, which is not "
                            f"here; fetch it with `python -m kjax.text.debian_corpus` "
                            f"(`make demo` does; it needs apt-get) or `apt-get install {PACKAGE}`")
        _convert(root, out_dir)
    return sorted(glob.glob(os.path.join(out_dir, "*.txt")))


def available() -> bool:
    return os.path.isfile(os.path.join(cache_dir(), "text", "done")) or _html_root() is not None


def fetch() -> str:
    """`apt-get download` + `dpkg-deb -x` into the cache; the package version."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise KjaxError(f"{tool} not found (not a Debian/Ubuntu system)")
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True,
                             text=True)
        debs = glob.glob(os.path.join(tmp, "*.deb"))
        if got.returncode or not debs:
            why = (got.stderr.strip().splitlines() or ["no .deb"])[-1]
            raise KjaxError(f"apt-get download {PACKAGE} failed: {why} (try `apt-get update`)")
        version = subprocess.run(["dpkg-deb", "-f", debs[0], "Version"], capture_output=True,
                                 text=True).stdout.strip()
        target = os.path.join(cache_dir(), "deb")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        unpacked = subprocess.run(["dpkg-deb", "-x", debs[0], target], capture_output=True,
                                  text=True)
        if unpacked.returncode:
            shutil.rmtree(target, ignore_errors=True)
            why = (unpacked.stderr.strip().splitlines() or ["?"])[-1]
            raise KjaxError(f"dpkg-deb -x {os.path.basename(debs[0])} failed: {why}")
    paths.write_text(os.path.join(cache_dir(), "VERSION"), version + "\n")
    return version


def main() -> int:
    """Fetches the package unless it is here. Never fails the caller: when
    it cannot, one line says so and what the demo trains on instead."""
    if available():
        return 0
    try:
        version = fetch()
        print(f"kjax: fetched {PACKAGE} {version} into {cache_dir()}")
    except (KjaxError, OSError) as e:
        print(f"kjax: {PACKAGE} was not fetched ({' '.join(str(e).split())}); the demo will "
              f"train on the KoNLPy and ChatterBot text alone, and say so", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
