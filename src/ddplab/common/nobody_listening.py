"""A client that asks for a store on a port where nobody listens, as a second node does when it
starts before the first or names the wrong address: run as ``python -c SCRIPT TIMEOUT``, it
prints the error torch raises once its timeout has passed (the running page and the
training-loop page both show it)."""

SCRIPT = """
import datetime, socket, sys
import torch.distributed as dist
free = socket.socket()
free.bind(("127.0.0.1", 0))
port = free.getsockname()[1]
free.close()  # free again: nobody listens there
try:
    dist.TCPStore("127.0.0.1", port, 2, False,
                  timeout=datetime.timedelta(seconds=float(sys.argv[1])))
except dist.DistNetworkError as exc:
    print(exc)
"""
