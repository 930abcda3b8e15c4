"""Every task module, imported so that its @register runs (create_task imports this file)."""

from . import circle_packing, general
from .forecasting import task as forecasting
from .scrna import task as batch_integration
from .sokoban import task as sokoban

__all__ = [
    "batch_integration",
    "circle_packing",
    "forecasting",
    "general",
    "sokoban",
]  # listed so that the imports count as used
