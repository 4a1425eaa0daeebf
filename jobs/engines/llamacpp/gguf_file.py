"""A GGUF file of the point's model, written with PyPI's `gguf` as llama.cpp's convert_hf_to_gguf.py writes a LLaMA
(its q/k permutation, its tensor names), in the GGUF type of the point's precision. Random-weight models have no
tokenizer: the vocabulary is a placeholder of the model's size (prompts are token ids, outputs are counted in
tokens), so only the ids mean anything."""
from __future__ import annotations

import hashlib
import os
import tempfile
from collections import Counter
from pathlib import Path

TYPES = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "int8": "Q8_0", "int4": "Q4_0"}   # precision -> GGUF type
ARCHITECTURES = ("llama", "mistral")   # written as GGUF's `llama` architecture, as convert_hf_to_gguf.py does
VERSION = 2   # of what write() puts in a file: a change makes new cache entries


def gguf_type(precision: str) -> str:
    try:
        return TYPES[precision]
    except KeyError:
        raise ValueError(f"engine llamacpp has no GGUF type for precision={precision}; it runs "
                         f"{', '.join(f'{p} ({t})' for p, t in TYPES.items())}") from None


def path_for(checkpoint: str, precision: str, cache: Path) -> Path:
    """Where the GGUF of `checkpoint` in `precision` is kept: by the checkpoint's path and its config's content."""
    config = Path(checkpoint, "config.json").read_bytes()
    key = hashlib.sha256(str(Path(checkpoint).resolve()).encode() + config).hexdigest()[:16]
    return cache / "gguf" / f"{Path(checkpoint).name}.{key}.v{VERSION}.{gguf_type(precision)}.gguf"


def convert(checkpoint: str, precision: str, cache: Path) -> str:
    """The GGUF of a transformers checkpoint directory, written once (atomically) and reused."""
    path = path_for(checkpoint, precision, cache)
    if path.is_file() and not _whole(path):   # truncated or overwritten since: written again
        print(f"[accelsweep] the cached GGUF {path} cannot be read whole; writing it again", flush=True)
        path.unlink()
    if not path.is_file():
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        try:
            write(model, tmp, gguf_type(precision))
            os.rename(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return str(path)


def _whole(path: Path) -> bool:
    """The file reads as GGUF with tensors, each one's data inside it (a truncated file fails gguf's reader)."""
    import gguf

    try:
        tensors, size = gguf.GGUFReader(str(path)).tensors, path.stat().st_size
        return bool(tensors) and all(t.data_offset + t.n_bytes <= size for t in tensors)
    except Exception:   # noqa: BLE001 - gguf raises what a damaged file makes it raise (IndexError, ValueError...)
        return False


def _permute(w, n_head: int, n_kv: int | None):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotary halves interleaved as llama.cpp's rope expects."""
    if n_kv is not None and n_head != n_kv:
        n_head = n_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _vocabulary(writer, size: int) -> None:
    # no byte tokens: a token that decodes to part of a UTF-8 character is held back by llama.cpp's server until
    # the character completes, with its logprobs, which would hide generated tokens from the stream and the gate
    tokens = ["<unk>", "<s>", "</s>"] + [f"\u2581t{i}" for i in range(3, size)]
    kinds = [2, 3, 3] + [1] * (size - 3)   # unknown, control, control, normal (gguf.TokenType)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens[:size])
    writer.add_token_scores([0.0] * size)
    writer.add_token_types(kinds[:size])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)   # the prompts are token ids, sent as they are


def write(model, path: str, type_name: str) -> None:
    """Write `model` (a transformers LLaMA or Mistral) as GGUF; 2-D weights in `type_name`, norms in F32, and a
    weight whose rows do not split into the type's blocks in F16 (as convert_hf_to_gguf.py falls back)."""
    import gguf

    c = model.config
    if c.model_type not in ARCHITECTURES:
        raise ValueError(f"engine llamacpp writes GGUF for {', '.join(ARCHITECTURES)} models; model_type="
                         f"{c.model_type!r} is not one")
    writer = gguf.GGUFWriter(path, "llama")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    rope = (getattr(c, "rope_parameters", None) or {}).get("rope_theta") or getattr(c, "rope_theta", 10000.0)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(float(rope))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(c.vocab_size)
    _vocabulary(writer, c.vocab_size)
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
    wanted = gguf.GGMLQuantizationType[type_name]
    for hf_name, tensor in model.state_dict().items():
        data = tensor.detach().float().numpy()
        if hf_name.endswith("q_proj.weight"):
            data = _permute(data, c.num_attention_heads, c.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            data = _permute(data, c.num_attention_heads, c.num_key_value_heads)
        kind = wanted if data.ndim > 1 else gguf.GGMLQuantizationType.F32
        try:
            out = gguf.quants.quantize(data, kind)
        except gguf.QuantError:
            kind = gguf.GGMLQuantizationType.F16
            out = gguf.quants.quantize(data, kind)
        writer.add_tensor(names.get_name(hf_name, try_suffixes=(".weight", ".bias")), out, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tensor_types(path: str) -> str:
    """The file's tensor types and how many tensors of each, e.g. 'Q8_0:14 F16:2 F32:5' (what it really holds)."""
    import gguf

    counts = Counter(t.tensor_type.name for t in gguf.GGUFReader(path).tensors)
    return " ".join(f"{name}:{n}" for name, n in counts.most_common())
