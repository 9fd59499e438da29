"""One measured figure beside the model's prediction of it: the report's unit of comparison."""

from __future__ import annotations


def compared(measured: float, predicted: float, unit: str) -> dict:
    """``{measured, predicted, ratio, unit}``; ``ratio`` is measured over predicted (None where
    the model predicts nothing, i.e. zero)."""
    ratio = measured / predicted if predicted else None
    return {"measured": float(measured), "predicted": float(predicted), "ratio": ratio,
            "unit": unit}


def predicted_only(predicted: float, unit: str) -> dict:
    """A model's figure with nothing measured to set beside it (a larger cluster)."""
    return {"predicted": float(predicted), "unit": unit}


def measured_only(measured: float, unit: str) -> dict:
    return {"measured": float(measured), "unit": unit}
