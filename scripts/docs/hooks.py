"""MkDocs hooks of the documentation site (mkdocs.yml): the parts generated from the code and the
benchmark charts, at every build, so that no generated text or image is committed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # gate and dc_schema, also without installing

import gen_charts  # noqa: E402  (beside this file: MkDocs puts its folder on the path while loading it)
import gen_tables  # noqa: E402


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    try:
        return gen_tables.expand(markdown)
    except gen_tables.DocsDrift as exc:
        raise PluginError(f"{page.file.src_uri}: {exc}") from None


def on_files(files: Files, config: Any) -> Files:
    for path, draw in gen_charts.CHARTS.items():
        files.append(File.generated(config, path, content=draw()))
    return files
