"""What cannot run on a CPU stops with an error naming the call: a custom CUDA extension
(``torch.utils.cpp_extension.load`` / ``load_inline`` with CUDA sources) and Triton imported by
the script's own files (Triton compiles GPU kernels only)."""

from __future__ import annotations

import sys

from ddplab.doctor.ranks import patching, where

CANNOT = "ddplab doctor: this machine has no GPU for this rank, and"


def install() -> None:
    import torch.utils.cpp_extension as extension

    def make_load(real):
        def load(*args, **kwargs):
            sources = [str(s) for s in (kwargs.get("sources") or (args[1:2] and args[1]) or [])]
            if (kwargs.get("cuda_sources") or any(s.endswith(".cu") for s in sources)
                    or kwargs.get("with_cuda")):
                raise RuntimeError(f"{CANNOT} a custom CUDA extension "
                                   f"(torch.utils.cpp_extension.{real.__name__}) cannot run "
                                   "on a CPU: run the doctor where each rank has a GPU")
            return real(*args, **kwargs)
        return load

    for name in ("load", "load_inline"):
        patching.wrap(extension, name, make_load, "cuda")
    if not any(isinstance(f, _TritonRefused) for f in sys.meta_path):
        sys.meta_path.insert(0, _TritonRefused())


class _TritonRefused:
    """``import triton`` in the script's own files: Triton compiles GPU kernels only."""

    def find_spec(self, name, path=None, target=None):
        if name != "triton" and not name.startswith("triton."):
            return None
        frame = sys._getframe(1)
        while frame is not None and "importlib" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is not None and where.is_reader_file(frame.f_code.co_filename):
            raise ImportError(f"{CANNOT} Triton (import triton) compiles GPU kernels only: run "
                              "the doctor where each rank has a GPU", name=name)
        return None
