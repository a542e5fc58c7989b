"""The Hangul font every kjax picture draws Korean text in: NanumGothic,
which the koreanize-matplotlib wheel ships (a kjax dependency: nothing to
install system-wide, works offline). Its font file is registered with
matplotlib without importing that package (its import changes global
rcParams and needs distutils); else an installed Hangul font; None if none."""
from __future__ import annotations

import importlib.util
import os

HANGUL_FONTS = ("NanumGothic", "NanumBarunGothic", "Noto Sans CJK KR", "Noto Sans KR",
                "Noto Sans CJK JP", "Source Han Sans KR", "Malgun Gothic", "AppleGothic",
                "Apple SD Gothic Neo", "UnDotum", "Baekmuk Gulim")


def bundled_font_file() -> str | None:
    """NanumGothic.ttf of the koreanize-matplotlib wheel (found, not imported)."""
    spec = importlib.util.find_spec("koreanize_matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "fonts", "NanumGothic.ttf")
        if os.path.isfile(path):
            return path
    return None


def hangul_font() -> str | None:
    """A font family with Hangul: the bundled NanumGothic, else an installed one."""
    from matplotlib import font_manager
    installed = {f.name for f in font_manager.fontManager.ttflist}
    bundled = bundled_font_file()
    if bundled and "NanumGothic" not in installed:
        font_manager.fontManager.addfont(bundled)
        installed.add("NanumGothic")
    return next((name for name in HANGUL_FONTS if name in installed), None)
