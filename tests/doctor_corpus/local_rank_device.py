"""--local_rank from argparse picks the GPU, as scripts written for torch.distributed.launch
do; torchrun passes no --local_rank, so the default -1 makes the device.

    torchrun --nproc-per-node 2 local_rank_device.py
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
device = torch.device("cuda", args.local_rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1).to(device),
                                            device_ids=[args.local_rank])
