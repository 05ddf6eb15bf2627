"""Make the three source trees importable without installing the package."""
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
for _sub in ("runtime", "train", "export"):
    _p = str(_ROOT / _sub)
    if _p not in sys.path:
        sys.path.insert(0, _p)
