"""The book's error index (``book/errors.md``) as the doctor reads a crash: one record per
entry, the texts of the message that name it, its cause in a sentence and what to change.
``tests/test_doctor_error_index.py`` holds each record against its entry on the page (the
label exists, the heading quotes the message) and makes each message in a run of torch.

A crash no check explains is looked up here (``known-crash``); the first entry whose text is
in the error line or the traceback names it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Entry:
    label: str  # the entry's label in book/errors.md, (label)= before its heading
    texts: tuple  # parts of the message, any one of which names the entry
    cause: str  # why, in a sentence
    fix: str  # what to change, as code


PREFIX_LABEL = "errors-state-dict-prefix"  # state-dict-prefix defers to this entry's finding
FIX_PREFIX = """\
torch.save(ddp.module.state_dict(), path)  # save the plain module's state
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
consume_prefix_in_state_dict_if_present(state, "module.")  # an old checkpoint"""

ENTRIES = (
    Entry("errors-sampler-shuffle", ("sampler option is mutually exclusive with shuffle",),
          "a DataLoader given a sampler cannot shuffle too: the DistributedSampler shuffles "
          "(each epoch's order comes from set_epoch)",
          """\
sampler = DistributedSampler(dataset, shuffle=True)  # the sampler shuffles
loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)  # no shuffle=True
for epoch in range(num_epochs):
    sampler.set_epoch(epoch)"""),
    Entry(PREFIX_LABEL,
          ('Unexpected key(s) in state_dict: "module.', 'Missing key(s) in state_dict'),
          "a state dict saved from the DDP wrapper has keys that start with 'module.', and "
          "was loaded into the plain model (or the other way round)",
          FIX_PREFIX),
    Entry("errors-sync-batchnorm-cpu",
          ("SyncBatchNorm expected input tensor to be on GPU",
           "SyncBatchNorm layers only work with GPU modules"),
          "SyncBatchNorm runs on GPUs only (torch has no CPU kernels for it); on CPU ranks "
          "every rank normalises its own batch",
          """\
if device.type == "cuda":  # SyncBatchNorm on GPUs only
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
model = DDP(model.to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)"""),
    Entry("errors-no-cuda",
          ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver",
           "No CUDA GPUs are available", "Cannot access accelerator device when none is",
           "has no attribute '_cuda_setDevice'"),
          "the script asks for a GPU that this machine does not have",
          """\
local_rank = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")"""),
)

NO_GROUP = "errors-local-rank"  # the entry for a script that never joined a group
FIX_LOCAL_RANK = """\
local_rank = int(os.environ["LOCAL_RANK"])  # torchrun sets it, and no --local_rank
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")"""
ENTRIES += (Entry(NO_GROUP, ("Device index must not be negative",
                            "Invalid device string: 'cuda:None'"),
                  "a device made from a --local_rank option whose default (-1, or None where "
                  "the option has none) stayed: torchrun passes no --local_rank, it sets "
                  "LOCAL_RANK", FIX_LOCAL_RANK),)


def match(crash) -> Entry | None:
    """The entry whose message this crash (a ``messages.Crash``) gave, if any."""
    return next((e for e in ENTRIES if any(crash.says(text) for text in e.texts)), None)
