"""Make the source-tree packages importable without installing (runtime/, train/, export/)."""
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for _sub in ("export", "train", "runtime"):
    _p = str(_ROOT / _sub)
    if _p not in sys.path:
        sys.path.insert(0, _p)
