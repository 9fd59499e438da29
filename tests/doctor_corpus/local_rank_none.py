"""--local_rank from argparse with no default, the device named in an f-string, as scripts
written for torch.distributed.launch do; torchrun passes no --local_rank, so it stays None.

    torchrun --nproc-per-node 2 local_rank_none.py
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int)
args = parser.parse_args()
device = torch.device(f"cuda:{args.local_rank}")
torch.cuda.set_device(device)
dist.init_process_group(backend="nccl")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1).to(device),
                                            device_ids=[args.local_rank])
