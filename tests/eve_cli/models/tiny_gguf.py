"""A tiny llama-architecture model in GGUF, written at test time with the ``gguf`` package:
random weights, a vocabulary of single characters (and the 256 byte tokens), a chat template.
It says nothing sensible, but a server constrained by a grammar (a JSON schema) makes it
answer valid JSON, which is what a structured-output test needs from a real server."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write(path: Path, *, width: int = 64, layers: int = 2, heads: int = 4) -> Path:
    """Write the model to ``path`` (about 0.5 MB) and return it."""
    rng = np.random.default_rng(7)
    roles = ["<|user|>", "<|assistant|>", "<|system|>", "<|tool|>"]
    chars = ["\u2581"] + [chr(c) for c in range(33, 127)]  # SentencePiece's space, then ASCII
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *chars, *roles]
    kind = gguf.TokenType
    types = [kind.UNKNOWN, kind.CONTROL, kind.CONTROL, *[kind.BYTE] * 256]
    types += [kind.NORMAL] * len(chars) + [kind.CONTROL] * len(roles)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("eve-tiny")
    writer.add_context_length(4096)
    writer.add_embedding_length(width)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(width * 2)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(width // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 3 + [-1000.0] * 256 + [-1.0] * (len(chars) + len(roles)))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)

    def ones(name: str) -> None:
        writer.add_tensor(name, np.ones(width, dtype=np.float32))

    def random(name: str, rows: int, columns: int) -> None:
        # numpy's (rows, columns) is GGUF's (columns, rows): a matrix maps `columns` to `rows`.
        writer.add_tensor(name, (rng.standard_normal((rows, columns)) * 0.02).astype(np.float32))

    random("token_embd.weight", len(tokens), width)
    ones("output_norm.weight")
    random("output.weight", len(tokens), width)
    for i in range(layers):
        ones(f"blk.{i}.attn_norm.weight")
        ones(f"blk.{i}.ffn_norm.weight")
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            random(f"blk.{i}.{name}.weight", width, width)
        random(f"blk.{i}.ffn_gate.weight", width * 2, width)
        random(f"blk.{i}.ffn_up.weight", width * 2, width)
        random(f"blk.{i}.ffn_down.weight", width, width * 2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
