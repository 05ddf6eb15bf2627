"""Make the repo's source trees importable in tests without installing the package."""
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
for _d in ("runtime", "train", "export"):
    _p = str(_REPO / _d)
    if _p not in sys.path:
        sys.path.insert(0, _p)
