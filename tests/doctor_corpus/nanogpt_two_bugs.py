"""A nanoGPT-style loop with two mistakes: the loss of each micro-step is not divided by the
number of micro-steps, and every rank saves the checkpoint (the master_process check is
missing around torch.save).

    torchrun --standalone --nproc_per_node=2 nanogpt_two_bugs.py
"""
import os

import torch
from tinygpt import TinyGPT
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
save_interval = 4
gradient_accumulation_steps = 4
batch_size = 4
block_size = 16
learning_rate = 6e-4
max_iters = 12

init_process_group(backend="gloo")
ddp_rank = int(os.environ["RANK"])
ddp_world_size = int(os.environ["WORLD_SIZE"])
gradient_accumulation_steps //= ddp_world_size
torch.manual_seed(1337 + ddp_rank)
os.makedirs(out_dir, exist_ok=True)
data = torch.randint(32, (4096,), generator=torch.Generator().manual_seed(0))


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


model = DDP(TinyGPT(block_size=block_size))
raw_model = model.module
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
X, Y = get_batch()
for iter_num in range(1, max_iters + 1):
    for micro_step in range(gradient_accumulation_steps):
        model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        logits, loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % save_interval == 0:
        checkpoint = {"model": raw_model.state_dict(), "iter_num": iter_num}
        torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
destroy_process_group()
