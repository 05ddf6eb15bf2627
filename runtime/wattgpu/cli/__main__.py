"""``python -m wattgpu.cli``."""
from . import main

main()
