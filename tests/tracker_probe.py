"""A DDP script that reports to wandb, MLflow, Comet and the Hugging Face Hub as a reader's
would (keys of the right shape, no mode of its own unless PROBE_WANDB_MODE gives one); an
audit hook (``sys.addaudithook``) lists every name it resolves and every connection it tries
beyond loopback, and every process it starts (wandb's ``wandb-core`` sends from one). Rank 0
writes the list to PROBE_OUT: under the doctor, the temporary folder is written as it is.
Run by ``tests/test_doctor_trackers.py``."""
import ipaddress
import os
import sys

tried = []


def _outside(host):
    try:
        return not ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return host not in ("localhost", "vm", None)


def _hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and _outside(args[1][0]):
        tried.append(f"connect {args[1][:2]}")
    elif event == "socket.getaddrinfo" and _outside(args[0]):
        tried.append(f"resolve {args[0]}")
    elif event == "subprocess.Popen":
        tried.append(f"process {args[0]}")


sys.addaudithook(_hook)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()

errors = []
if rank == 0:
    def attempt(name, call):
        try:
            call()
        except BaseException as exc:  # noqa: BLE001  a tracker's failure, named
            errors.append(f"{name}: {type(exc).__name__}")

    def use_wandb():
        import wandb
        run = wandb.init(project="p", mode=os.environ.get("PROBE_WANDB_MODE") or None,
                         settings=wandb.Settings(init_timeout=30))
        run.log({"loss": loss.item()})
        run.finish()

    def use_mlflow():
        import mlflow
        with mlflow.start_run():
            mlflow.log_metric("loss", loss.item())

    def use_comet():
        import comet_ml
        exp = comet_ml.Experiment(api_key="0" * 25, project_name="p")
        exp.log_metric("loss", loss.item())
        exp.end()
        exp2 = comet_ml.start(api_key="0" * 25, project_name="p")
        exp2.log_metric("loss", loss.item())
        exp2.end()

    def use_hub():
        from huggingface_hub import HfApi
        HfApi(token="hf_" + "0" * 34).upload_file(path_or_fileobj=b"x", path_in_repo="x",
                                                  repo_id="me/model")

    for name, call in [("wandb", use_wandb), ("mlflow", use_mlflow), ("comet", use_comet),
                       ("hub", use_hub)]:
        before = len(tried)
        attempt(name, call)
        tried[before:] = [f"{name}: {t}" for t in tried[before:]]
    report = f"PROBE tried: {tried or 'nothing'} | errors: {errors}"
    print(report, flush=True)
    if os.environ.get("PROBE_OUT"):  # under the doctor: the temporary folder is written as is
        with open(os.environ["PROBE_OUT"], "w") as f:
            f.write(report + "\n")
dist.destroy_process_group()
