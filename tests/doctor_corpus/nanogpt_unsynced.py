"""nanoGPT's loop with the micro-step condition inverted: the gradients are synchronised on
the first micro-step, and the last one (whose backward leaves the gradient the optimizer
uses) runs without synchronisation (the FunASR#3472 / build-nanogpt#30 class of bug).

    torchrun --standalone --nproc_per_node=2 nanogpt_unsynced.py
"""
import os

import torch
from tinygpt import TinyGPT
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

gradient_accumulation_steps = 4
batch_size = 4
block_size = 16
learning_rate = 6e-4
max_iters = 12

init_process_group(backend="gloo")
ddp_rank = int(os.environ["RANK"])
ddp_world_size = int(os.environ["WORLD_SIZE"])
master_process = ddp_rank == 0
gradient_accumulation_steps //= ddp_world_size
torch.manual_seed(1337 + ddp_rank)
data = torch.randint(32, (4096,), generator=torch.Generator().manual_seed(0))


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


model = DDP(TinyGPT(block_size=block_size))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
X, Y = get_batch()
for iter_num in range(max_iters):
    for micro_step in range(gradient_accumulation_steps):
        model.require_backward_grad_sync = (micro_step == 0)
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if master_process:
        print(f"iter {iter_num}: loss {loss.item() * gradient_accumulation_steps:.4f}")
destroy_process_group()
