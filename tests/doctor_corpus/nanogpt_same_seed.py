"""nanoGPT's DDP training loop with the seed_offset left at 0 on every rank: the batches are
drawn with torch.randint, so every rank seeds 1337, draws the same offsets and trains on the
same batch. The replicas stay equal, so nothing fails; the other ranks' work is wasted and the
global batch is one rank's.

    torchrun --standalone --nproc_per_node=2 nanogpt_same_seed.py
"""
import os
import time
from contextlib import nullcontext

import torch
from tinygpt import TinyGPT
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
eval_interval = 4
eval_iters = 2
gradient_accumulation_steps = 4  # used to simulate larger batch sizes
batch_size = 4
block_size = 16
learning_rate = 6e-4
max_iters = 12
grad_clip = 1.0
backend = "nccl" if torch.cuda.is_available() else "gloo"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = "float16" if torch.cuda.is_available() else "float32"

ddp = int(os.environ.get("RANK", -1)) != -1  # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        device = f"cuda:{ddp_local_rank}"
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = 0  # every process the same seed
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
if master_process:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type, dtype=ptdtype)

data = torch.randint(32, (4096,), generator=torch.Generator().manual_seed(0))


def get_batch(split):
    source = data[:3584] if split == "train" else data[3584:]
    ix = torch.randint(len(source) - block_size, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


model = TinyGPT(block_size=block_size).to(device)
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95))
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == "cuda" else None)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


X, Y = get_batch("train")
t0 = time.time()
iter_num = 0
raw_model = model.module if ddp else model
while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num > 0:
            checkpoint = {"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                          "iter_num": iter_num}
            torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            # sync the gradients at the last micro step only (what no_sync() toggles)
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if master_process:
        print(f"iter {iter_num}: loss {loss.item() * gradient_accumulation_steps:.4f}")
    iter_num += 1
    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()
