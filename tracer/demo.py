"""`make demo`: trace a real multi-backend llama.cpp run and summarise it.

The run: ggml-rpc-server on loopback and llama-completion offloading every layer to it, with the
KV cache kept on the CPU (-nkvo), so each graph alternates between CPU and RPC0 splits, fed by
copies. Both processes are traced.
"""
import json
import sys
from pathlib import Path

from analysis import load
from .hooks import build_root
from .programs import hooks, program, rpc_server, tiny_model
from .record import record

BUILD = "b10531"


def main(out_dir: Path = None) -> int:
    out_dir = Path(out_dir or build_root() / "demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    client_trace = out_dir / "llama-completion.ggmltrace"
    server_trace = out_dir / "rpc-server.ggmltrace"
    with rpc_server(BUILD, trace=server_trace) as endpoint:
        cmd = [str(program(BUILD, "llama-completion")), "-m", str(tiny_model()), "--rpc", endpoint,
               "-ngl", "99", "-nkvo", "-n", "16", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv"]
        print("$ ggml-trace record -o", client_trace, "--", " ".join(cmd), flush=True)
        rec = record(cmd, hooks(BUILD), client_trace, stdout=sys.stdout, stderr=open(out_dir / "llama.log", "w"))
    if rec.returncode != 0 or not rec.traces:
        print(f"demo: llama-completion failed ({rec.describe_exit()}); see {out_dir / 'llama.log'}", file=sys.stderr)
        return 1
    print()
    for path in (client_trace, server_trace):
        trace = load(path)
        s = trace.summary()
        print(f"{path}: {s['graphs']} graph computes, {len(trace.calls)} calls, {len(trace.accesses)} byte ranges")
        print(json.dumps(s["backends"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
