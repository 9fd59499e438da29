"""Mixed precision and clipping: ``GradScaler.scale`` / ``unscale_`` / ``update`` and
``clip_grad_norm_`` / ``clip_grad_value_`` (no hooks exist: wrapped).

Clipping while an enabled scaler has scaled this step's loss and not yet unscaled the
gradients clips ``scale`` times the true gradient (pytorch/examples#1196).
"""

from __future__ import annotations

import weakref

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder

SCALERS: weakref.WeakSet = weakref.WeakSet()


def install() -> None:
    import torch
    from torch.amp import GradScaler

    def make_scale(real):
        def scale(self, outputs):
            if self.is_enabled():
                SCALERS.add(self)
                self.__dict__["_ddplab_scaled"] = True
                self.__dict__["_ddplab_unscaled"] = False
                _recorder.RECORDER.last_scale = float(self.get_scale())
            return real(self, outputs)
        return scale

    def make_unscale(real):
        def unscale_(self, optimizer):
            self.__dict__["_ddplab_unscaled"] = True
            return real(self, optimizer)
        return unscale_

    def make_update(real):
        def update(self, *args, **kwargs):
            self.__dict__["_ddplab_scaled"] = False
            self.__dict__["_ddplab_unscaled"] = False
            return real(self, *args, **kwargs)
        return update

    def make_clip(how):
        def make(real):
            def clip(parameters, *args, **kwargs):
                rec = _recorder.RECORDER
                scaled = [s for s in SCALERS if s.__dict__.get("_ddplab_scaled")
                          and not s.__dict__.get("_ddplab_unscaled")]
                spot = where.line()
                result = real(parameters, *args, **kwargs)
                limit = args[0] if args else kwargs.get("max_norm", kwargs.get("clip_value"))
                rec.add(records.Clip(
                    how=how, **where.fields(spot), scaled=bool(scaled),
                    scale=float(scaled[0].get_scale()) if scaled else None,
                    norm=float(result) if isinstance(result, torch.Tensor) else None,
                    limit=float(limit) if limit is not None else None))
                return result
            return clip
        return make

    patching.wrap(GradScaler, "scale", make_scale)
    patching.wrap(GradScaler, "unscale_", make_unscale)
    patching.wrap(GradScaler, "update", make_update)
    patching.wrap(torch.nn.utils, "clip_grad_norm_", make_clip("clip_grad_norm_"))
    patching.wrap(torch.nn.utils, "clip_grad_value_", make_clip("clip_grad_value_"))
