"""What an int8 attention would cost in accuracy (issue 27): all-MiniLM-L6-v2 in transformers
with its self-attention replaced by a fake-quantized one (the linear layers stay f32), over the
golden sentences, each variant's embeddings against the unquantized run's (cosines).

Variants: Q and K symmetric int8 per (token, head) (what a vpdpbusd Q.K^T would take); P, the
softmax numerators exp(s - max) in [0, 1], as u8 in 255 steps per row (a u8 x s8 P.V); V
symmetric int8 per (sequence, head, channel); all three. Bench-only (the bench venv):

    .venv-bench/bin/python bench/attn_int8_sim.py     (from the repository root)
"""
import numpy as np
import torch

from minilm_sim import embed as embed_texts, golden_sentences, load

sents = golden_sentences()
tok, model = load(attn_implementation="eager")
MODE = {"qk": False, "p": False, "v": False}


def q8(x, dim):
    """Symmetric int8 fake quantization, one scale per slice along dim."""
    s = x.abs().amax(dim=dim, keepdim=True).clamp_min(1e-12) / 127.0
    return torch.round(x / s).clamp(-127, 127) * s


def attn_forward(self, hidden_states, attention_mask=None, **kw):
    """BertSelfAttention.forward with the MODE's fake quantizations."""
    B, T, _ = hidden_states.shape
    H, D = self.num_attention_heads, self.attention_head_size
    q = self.query(hidden_states).view(B, T, H, D).transpose(1, 2)
    k = self.key(hidden_states).view(B, T, H, D).transpose(1, 2)
    v = self.value(hidden_states).view(B, T, H, D).transpose(1, 2)
    if MODE["qk"]:
        q, k = q8(q, -1), q8(k, -1)
    s = q @ k.transpose(-1, -2) / D ** 0.5
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            s = s.masked_fill(~attention_mask, float("-inf"))
        else:
            s = s + attention_mask
    e = torch.exp(s - s.amax(-1, keepdim=True))
    if MODE["p"]:
        e = torch.round(e * 255.0) / 255.0
    if MODE["v"]:
        v = q8(v, -2)
    o = (e @ v) / e.sum(-1, keepdim=True)
    return o.transpose(1, 2).reshape(B, T, H * D), None


for layer in model.encoder.layer:
    layer.attention.self.forward = attn_forward.__get__(layer.attention.self)


def embed():
    """The golden sentences' embeddings as the model gives them now."""
    return embed_texts(tok, model, sents)


ref = embed()
gold = np.fromfile("tests/golden/embeddings.f32", dtype="<f4").reshape(len(sents), -1)
print("f32 sim vs golden: min cos %.6f" % (ref * gold).sum(1).min())
variants = [("Q,K int8", dict(qk=True, p=False, v=False)),
            ("P u8", dict(qk=False, p=True, v=False)),
            ("V int8", dict(qk=False, p=False, v=True)),
            ("all", dict(qk=True, p=True, v=True))]
for name, mode in variants:
    MODE.update(mode)
    e = embed()
    c = (e * ref).sum(1)
    print("%-9s vs f32: min cos %.6f mean %.6f" % (name, c.min(), c.mean()))
