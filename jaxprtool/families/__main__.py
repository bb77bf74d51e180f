"""`python -m jaxprtool.families`: rewrite `index.py` (which families define each primitive)."""

from pathlib import Path

from . import index_source

Path(__file__).with_name("index.py").write_text(index_source(), encoding="utf-8")
