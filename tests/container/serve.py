"""The process tree `vllm serve MODEL --tensor-parallel-size N` starts, for a container without a GPU
(vLLM 0.30.0's own server stops there for lack of kernels, docs/testing.md): the main process (which
is the one API server), an EngineCore spawned from it and N VllmWorker-R spawned from that, each
running vLLM's real ``vllm.plugins.load_general_plugins()`` first, as vLLM does in every process.
The main process answers ``GET /health`` on port 8000 (vLLM's health endpoint) once it has loaded the
plugins. The engine core starts its workers only once ``/tmp/start-workers`` exists, so a test can
ask the healthcheck while they are not up. Mounted read-only into the container; nothing else of it
is in the image."""

import http.server
import multiprocessing as mp
import os
import signal
import sys
import time

from vllm.plugins import load_general_plugins

GO = "/tmp/start-workers"


def worker():
    load_general_plugins()
    while True:
        time.sleep(3600)


def engine(world):
    load_general_plugins()
    while not os.path.exists(GO):
        time.sleep(0.1)
    spawn = mp.get_context("spawn")
    workers = [spawn.Process(name=f"VllmWorker-{rank}", target=worker) for rank in range(world)]
    for process in workers:
        process.start()
    print(f"EngineCore pid={os.getpid()} started workers " + " ".join(str(p.pid) for p in workers), flush=True)
    for process in workers:
        process.join()


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path == "/health" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # PID 1: the kernel ends the others with it
    load_general_plugins()
    args = sys.argv[1:]
    world = int(args[args.index("--tensor-parallel-size") + 1]) if "--tensor-parallel-size" in args else 1
    core = mp.get_context("spawn").Process(name="EngineCore", target=engine, args=(world,))
    core.start()
    print(f"main pid={os.getpid()} EngineCore pid={core.pid}; serving /health on :8000", flush=True)
    http.server.ThreadingHTTPServer(("0.0.0.0", 8000), Health).serve_forever()
