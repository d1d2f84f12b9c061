"""The pipeline-parallel race's shared parts (docs/pipeline-parallel.md): the prompt that makes the
prefill pipeline, and the finding that is that race."""
import random

# ~1000 tokens in ubatches of 32, batches of 8 of them: the prefill pipelines. The words in a seeded
# random order: in a periodic prompt, consecutive ubatches can hold the same tokens, and an embedding
# read one ubatch late is then the right one (docs/pipeline-parallel.md).
WORDS = "the of and to a in is it you that he was for on are with as I his they be at one have this from".split()
_rng = random.Random(1)
PROMPT = " ".join(_rng.choice(WORDS) for _ in range(200))  # ~1000 tokens


def the_cross_graph_race(found):
    """The race of this finding: a device's copy (as a split's input) of a tensor the CPU split of
    the *next* graph writes again, over the same bytes of the CPU's compute buffer."""
    return [r for r in found if "CPU" in (r["a"]["backend"], r["b"]["backend"])
            and "cpy_tensor_async" in (r["a"]["kind"], r["b"]["kind"])
            and r["a"]["graph"] != r["b"]["graph"]]
