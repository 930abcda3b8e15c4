"""Every task module, imported so that its @register runs (create_task imports this file)."""
from . import circle_packing, general

__all__ = ["circle_packing", "general"]  # listed so that the imports count as used
