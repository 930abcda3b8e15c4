"""Every task module, imported so that its @register runs (create_task imports this file)."""
from . import circle_packing, general
from .scrna import task as batch_integration

__all__ = ["batch_integration", "circle_packing", "general"]  # listed so that the imports count as used
