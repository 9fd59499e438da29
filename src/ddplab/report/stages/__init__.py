"""The report's stages, in the order they run: one record each (``stage.Stage``), registered
here. Every stage calls a chapter's public driver (which runs on the local pool or under
torchrun alike) and returns a typed section (``stage.Section``): its part of report.json, and
what its figures and the stages that name it in ``needs`` use.

A stage is added by one module with its record, and one entry below; the driver, the schema,
the page and the summary read this tuple when they run."""

from ddplab.report.stages import (
    accumulation,
    allreduce,
    buckets,
    machine,
    memory,
    prediction,
    step,
)

STAGES = (machine.STAGE, allreduce.STAGE, step.STAGE, buckets.STAGE, accumulation.STAGE,
          memory.STAGE, prediction.STAGE)
