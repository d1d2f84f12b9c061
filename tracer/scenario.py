"""`ggml-trace scenario`: run a scheduler scenario on virtual async devices, many times, traced,
and compare each result bit-exactly with the same graph computed on the CPU alone."""
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .hooks import build_root, libraries_first
from .programs import bin_dir, hooks, program
from .record import trace_env

SCENARIOS = ["inputless-reuse", "cpu-async-cpu", "y-graph", "x-graph", "pipeline", "pipeline-input-reuse",
             "random-dag", "user-input-stall", "meta-allreduce", "alloc-dep"]
BACKENDS = ["vdev", "vulkan"]
META_SCENARIOS = {"meta-allreduce"}  # a meta (tensor-parallel) device over --devices VDEVs
SIZED_SCENARIOS = META_SCENARIOS | {"user-input-stall"}  # spread over --devices VDEVs (the others: their own)
DEFAULT_LATENCY_US = 5000.0


@dataclass
class ScenarioResult:
    scenario: str
    build: str
    runs: int
    corrupt_runs: int
    reference: str
    latency_us: float  # or one value per virtual device (a list)
    jitter_us: float
    seed: int
    corrupt: list = field(default_factory=list)  # indices of the corrupt runs
    traces: list = field(default_factory=list)
    backend: str = "vdev"  # or "vulkan": the real device (BACKENDS)
    graph: dict = field(default_factory=dict)  # splits and nodes of the first run's graph, as the program said (stderr)

    def to_json(self) -> dict:
        return asdict(self)


def _result_of(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("result "):
            return line.split()[1]
    raise RuntimeError(f"the scenario printed no result: {stdout[-500:]!r}")


def _graph_of(text: str) -> dict:
    """{"splits", "nodes"} from the program's "graph splits S nodes N" line ({} without one), and a
    spec's resident device work as the program sized it ("work": its "work NAME on ..." lines)."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["graph", "splits"] and len(w) == 5 and "splits" not in out:
            out |= {"splits": int(w[2]), "nodes": int(w[4])}
        elif w[:1] == ["work"] and "products" in w:
            out.setdefault("work", []).append(line.strip())
    return out


def parse_latencies(text) -> list[float]:
    """'3000' or '0,3000' (one value per virtual device) -> floats; ValueError on bad input."""
    try:
        values = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise ValueError(f"bad latency {text!r}: give microseconds, one value or A,B,... per device") from None
    if any(v < 0 or v != v for v in values):
        raise ValueError(f"bad latency {text!r}: microseconds must be >= 0")
    return values


def run(name: str, build: str = "b10531", runs: int = 10, latency_us=DEFAULT_LATENCY_US,
        jitter_us: float = 0.0, seed: int = 0, out_dir: Path | None = None, devices: int = 3,
        backend: str = "vdev", device_timing: bool = True, vdevs_beside: int = 0,
        spec: Path | None = None) -> ScenarioResult:
    """backend "vdev": virtual devices; "vulkan": the real Vulkan device 0 of the build's Vulkan tree
    (build/llama-BUILD-vulkan; lavapipe here), onto which every device of the scenario folds;
    latency and jitter do not apply, and `device_timing` turns on its markers (docs/vulkan.md);
    `vdevs_beside`: that many virtual devices beside it take the scenario's other devices (their
    latency and jitter apply). name "spec": the graph of the spec file `spec` (docs/reduce.md), over
    `devices` virtual devices."""
    if name == "spec" and not spec:
        raise ValueError("the spec scenario needs a spec file")
    if name not in SCENARIOS and name != "spec":
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "vulkan" and name in META_SCENARIOS:
        raise ValueError(f"{name} needs several virtual devices; it does not run on --backend vulkan")
    tree = build if backend == "vdev" or "-vulkan" in build else f"{build}-vulkan"
    lat = parse_latencies(latency_us)
    latency_us = lat[0] if len(lat) == 1 else lat
    env_latency = ",".join(f"{v:g}" for v in lat)
    # a sized scenario spreads over --devices devices; the others carry their own count
    extra = ["--devices", str(devices)] if name in SIZED_SCENARIOS else []
    extra += ["--backend", "vulkan"] if backend == "vulkan" else []
    extra += ["--spec", str(Path(spec).resolve())] if name == "spec" and spec else []
    extra += ["--devices", str(1 + vdevs_beside)] if vdevs_beside and name not in SIZED_SCENARIOS else []
    exe = str(program(tree, "ggml-trace-scenarios"))
    # the tree's own libraries first: a patched libggml-base beside a copied program (build_patched_base.sh)
    own = libraries_first(bin_dir(tree))
    out_dir = Path(out_dir or build_root() / "scenarios" / f"{name}-{tree}")
    out_dir.mkdir(parents=True, exist_ok=True)
    def reference_for(data_seed):  # the same graph and inputs, computed on the CPU alone
        ref = subprocess.run([exe, name, "--cpu-only", "--seed", str(data_seed)] + extra, capture_output=True, text=True,
                             timeout=120, env=own)
        if ref.returncode != 0:
            raise RuntimeError(f"CPU reference run failed: {ref.stderr[-2000:]}")
        return _result_of(ref.stdout)

    # Only random-dag draws its graph from the seed; the others keep one graph and one reference.
    per_run_graph = name == "random-dag"
    reference = reference_for(seed if per_run_graph else 1)
    result = ScenarioResult(name, build, runs, 0, reference, latency_us, jitter_us, seed, backend=backend)
    for i in range(runs):
        data_seed = seed + i if per_run_graph else 1
        expected = reference_for(data_seed) if per_run_graph else reference
        trace = out_dir / f"run-{i:03d}.ggmltrace"
        trace.unlink(missing_ok=True)
        base = dict(own)
        if backend == "vulkan":  # lavapipe is a CPU-type device: ggml lists it only when asked
            base.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
            base["GGML_TRACE_DEVICE_TIMING"] = "1" if device_timing else "0"
            if vdevs_beside:  # the scenario's other devices: virtual ones beside the real one
                base.update(GGML_TRACE_VIRTUAL_DEVICES=str(vdevs_beside), GGML_TRACE_VDEV_LATENCY_US=env_latency,
                            GGML_TRACE_VDEV_JITTER_US=str(jitter_us), GGML_TRACE_VDEV_SEED=str(seed + i))
        else:
            base.update(GGML_TRACE_VIRTUAL_DEVICES=str(devices), GGML_TRACE_VDEV_LATENCY_US=env_latency,
                        GGML_TRACE_VDEV_JITTER_US=str(jitter_us), GGML_TRACE_VDEV_SEED=str(seed + i))
        env = trace_env(hooks(tree), trace, base=base)
        r = subprocess.run([exe, name, "--seed", str(data_seed)] + extra, capture_output=True, text=True, timeout=120,
                           env=env)
        if r.returncode != 0:
            raise RuntimeError(f"run {i} of {name} failed ({r.returncode}): {r.stderr[-2000:]}")
        if i == 0:
            result.graph = _graph_of(r.stderr)
        if _result_of(r.stdout) != expected:
            result.corrupt_runs += 1
            result.corrupt.append(i)
        result.traces.append(str(trace))
    return result
