"""Writes a tiny random-weight GGUF (4 layers, 256 wide, byte-level SPM vocabulary): a llama
model, or with --arch qwen35 a Qwen3.5-style hybrid (gated delta net layers, every fourth layer
full attention) — the shape whose `model.input_embed` input reproduces llama.cpp issue #23321.

It runs in llama-simple, llama-completion and llama-bench, so traces come from real llama.cpp
programs on any machine. Weights are seeded: the same file every time.
    python scripts/make_tiny_model.py OUT.gguf [--arch llama|qwen35] [--layers 4] [--embd 256]
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
    ap.add_argument("--arch", choices=["llama", "qwen35"], default="llama")
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

    w = gguf.GGUFWriter(args.out, args.arch)
    w.add_name(f"ggml-trace tiny {args.arch}")
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
    if args.arch == "qwen35":
        qwen35_layers(w, args, mat, ones)
    for i in range(args.layers if args.arch == "llama" else 0):
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


def qwen35_layers(w, args, mat, ones):
    """Qwen3.5 blocks: gated delta net (linear attention) layers, full attention every 4th."""
    n_embd, n_ff, n_head = args.embd, args.ff, args.heads
    head = n_embd // n_head
    d_state, k_heads, v_heads, d_conv = 32, 2, 4, 4  # head size, key heads, value heads, conv width
    key_dim, value_dim = d_state * k_heads, d_state * v_heads
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_sections([head // 8 * 3 // 2, head // 8 * 3 // 2, head // 8, 0])
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(v_heads)
    w.add_ssm_group_count(k_heads)
    w.add_full_attention_interval(4)
    for i in range(args.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "post_attention_norm.weight", ones(n_embd))
        if (i + 1) % 4 == 0:  # full attention: q carries its gate, hence twice as wide
            w.add_tensor(p + "attn_q.weight", mat(2 * n_embd, n_embd))
            w.add_tensor(p + "attn_k.weight", mat(n_embd, n_embd))
            w.add_tensor(p + "attn_v.weight", mat(n_embd, n_embd))
            w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
            w.add_tensor(p + "attn_q_norm.weight", ones(head))
            w.add_tensor(p + "attn_k_norm.weight", ones(head))
        else:
            w.add_tensor(p + "attn_qkv.weight", mat(2 * key_dim + value_dim, n_embd))
            w.add_tensor(p + "attn_gate.weight", mat(value_dim, n_embd))
            w.add_tensor(p + "ssm_conv1d.weight", mat(2 * key_dim + value_dim, d_conv))
            w.add_tensor(p + "ssm_dt.bias", np.zeros(v_heads, dtype=np.float32))
            w.add_tensor(p + "ssm_a", -np.ones(v_heads, dtype=np.float32))
            w.add_tensor(p + "ssm_beta.weight", mat(v_heads, n_embd))
            w.add_tensor(p + "ssm_alpha.weight", mat(v_heads, n_embd))
            w.add_tensor(p + "ssm_norm.weight", ones(d_state))
            w.add_tensor(p + "ssm_out.weight", mat(n_embd, value_dim))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))


if __name__ == "__main__":
    main()
