"""Writes a tiny random-weight llama GGUF (4 layers, 256 wide, byte-level SPM vocabulary).

It runs in llama-simple, llama-completion and llama-bench, so traces come from real llama.cpp
programs on any machine. Weights are seeded: the same file every time.
    python scripts/make_tiny_model.py OUT.gguf [--layers 4] [--embd 256]
"""
import argparse

import numpy as np
import gguf


def vocabulary():
    """<unk> <s> </s>, the 256 byte tokens, then a few words so that prompts tokenize compactly."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = "the of and to a in is it you that he was for on are with as I his they be at one have this from".split()
    tokens += ["\u2581" + w for w in words] + [c for c in "abcdefghijklmnopqrstuvwxyz"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (len(tokens) - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    tokens, scores, types = vocabulary()
    n_vocab, n_embd, n_ff = len(tokens), args.embd, args.ff
    rng = np.random.default_rng(args.seed)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("ggml-trace tiny llama")
    w.add_context_length(args.ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // args.heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def mat(rows, cols):  # numpy shape (rows, cols) is ggml ne = [cols, rows]
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    for i in range(args.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.add_tensor("output_norm.weight", ones(n_embd))
    w.add_tensor("output.weight", mat(n_vocab, n_embd))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
