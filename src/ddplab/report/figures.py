"""One measured figure beside the model's prediction of it: the report's unit of comparison,
and how the summary and the page write one."""

from __future__ import annotations

SCALE = {"s": (1e3, "ms"), "bytes": (1e-6, "MB"), "bytes/s": (1e-9, "GB/s"),
         "samples/s": (1, "samples/s"), "1": (100, "%")}


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


def value(x, unit: str) -> dict:
    """A figure the model does not predict; infinite or unknown is None."""
    return {"value": None if x in (None, float("inf")) else float(x), "unit": unit}


def shown(x: float | None, unit: str) -> str:
    """``x`` in the unit a reader reads it in: ms, MB, GB/s, %."""
    if x is None:
        return "-"
    factor, name = SCALE.get(unit, (1, unit))
    scaled = x * factor
    return f"{scaled:,.0f} {name}" if abs(scaled) >= 1000 else f"{scaled:.3g} {name}"
