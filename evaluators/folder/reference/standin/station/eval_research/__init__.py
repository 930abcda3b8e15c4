"""The reference's research-evaluation package: only its evaluator base class is stood in for."""
