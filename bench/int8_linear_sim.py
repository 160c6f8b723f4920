"""Where the int8 lane's accuracy goes (issue 27): all-MiniLM-L6-v2 in transformers with every
encoder linear layer fake-quantized as the CPU engine quantizes it, over the golden sentences,
each variant's embeddings against the unquantized run's (cosines).

Weights, per output channel: "full" (max|w| / 127, where the CPU has an int8 dot product),
"span" (AVX2's pair-safe rule: the largest same-signed neighbour pair sum as 127 steps), "clip"
(tried and dropped: per channel, the scale between those two with the smallest squared error,
pairs above 128 steps shrunk). Inputs, per token: "s8" (symmetric, max|x| / 127), "u8"
(asymmetric: 255 steps from min(x, 0) to max(x, 0), a zero point), "none" (weights only).
SmoothQuant as the engine applies it: the QKV and FFN-input layers' input channels divided by
max|x|^alpha / max|w|^(1 - alpha), the maxima from the first 512 calibration texts.
Bench-only (the bench venv), from the repository root:

    .venv-bench/bin/python bench/int8_linear_sim.py [alpha, default 0.5]
"""
import sys

import torch

from minilm_sim import embed as embed_texts, golden_sentences, load

ALPHA = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
sents = golden_sentences()
calib = [l.strip() for l in open("data/calib/calib.txt") if l.strip()][:512]
tok, model = load()
lins = [(n, m) for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.startswith("encoder")]
W0 = {n: m.weight.data.clone() for n, m in lins}
# the engine smooths the inputs of the attention stage (QKV) and of the FFN's first layer
SMOOTHED = lambda n: n.endswith(("query", "key", "value", "intermediate.dense"))


def w_full(w):
    s = w.abs().amax(1, keepdim=True) / 127
    return torch.round(w / s).clamp(-127, 127) * s


def pair_span(w):
    p = w.view(w.shape[0], -1, 2)
    same = (p[..., 0] > 0) == (p[..., 1] > 0)
    return torch.maximum(w.abs().amax(1), (p.abs().sum(-1) * same).amax(1))


def w_span(w):
    s = pair_span(w)[:, None] / 127
    return torch.round(w / s).clamp(-127, 127) * s


def w_clip(w, grid=12):
    a, span = w.abs().amax(1), pair_span(w)
    best, out = None, None
    for g in range(grid):
        s = ((a / 127) * (span / a) ** (g / (grid - 1)))[:, None]
        q = torch.round(w / s).clamp(-127, 127)
        qp, v = q.view(q.shape[0], -1, 2), (w / s).view(q.shape[0], -1, 2).abs()
        ex = (qp.abs().sum(-1) - 128).clamp_min(0) * ((qp[..., 0] >= 0) == (qp[..., 1] >= 0))
        r = qp.abs() - v
        d0 = torch.minimum(torch.round((ex + r[..., 0] - r[..., 1]) / 2).clamp_min(0), ex)
        na, nb = qp[..., 0].abs() - d0, qp[..., 1].abs() - (ex - d0)
        deq = torch.stack([torch.sign(qp[..., 0]) * na, torch.sign(qp[..., 1]) * nb],
                          -1).view_as(q) * s
        err = ((deq - w) ** 2).sum(1)
        if best is None:
            best, out = err, deq
        else:
            m = err < best
            best, out = torch.where(m, err, best), torch.where(m[:, None], deq, out)
    return out


def x_s8(x):
    s = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    return torch.round(x / s).clamp(-127, 127) * s


def x_u8(x):
    lo, hi = x.amin(-1, keepdim=True).clamp_max(0), x.amax(-1, keepdim=True).clamp_min(0)
    s = (hi - lo).clamp_min(1e-12) / 255
    zp = torch.round(-lo / s)
    return (torch.round(x / s) + zp).clamp(0, 255).sub(zp) * s


STATE = {"x": None, "smooth": {}}
AMAX = {}


def pre_hook(name):
    def f(mod, inp):
        x = inp[0]
        if STATE["x"] == "calib":
            a = x.abs().reshape(-1, x.shape[-1]).amax(0)
            AMAX[name] = torch.maximum(AMAX[name], a) if name in AMAX else a
            return None
        if STATE["x"] is None:
            return None
        sm = STATE["smooth"].get(name)
        return ((STATE["x"](x / sm) * sm) if sm is not None else STATE["x"](x),)
    return f


for n, m in lins:
    m.register_forward_pre_hook(pre_hook(n))


def embed(texts):
    return embed_texts(tok, model, texts)


STATE["x"] = "calib"
embed(calib)
STATE["x"] = None
ref = embed(sents)
for n, _ in lins:
    if SMOOTHED(n):
        wmax = W0[n].abs().amax(0).clamp_min(1e-5)
        STATE["smooth"][n] = AMAX[n].clamp_min(1e-5) ** ALPHA / wmax ** (1 - ALPHA)
print("alpha %.2f; min / mean cosine to f32 over %d golden sentences" % (ALPHA, len(sents)))
for wname, wq in (("full", w_full), ("span", w_span), ("clip", w_clip)):
    for n, m in lins:
        sm = STATE["smooth"].get(n)
        m.weight.data = wq(W0[n] * sm) / sm if sm is not None else wq(W0[n])
    for xname, xq in (("s8", x_s8), ("u8", x_u8), ("none", None)):
        STATE["x"] = xq
        c = (embed(sents) * ref).sum(1)
        print("weights %-4s  inputs %-4s  min %.6f  mean %.6f" % (wname, xname, c.min(), c.mean()),
              flush=True)
    STATE["x"] = None
for n, m in lins:
    m.weight.data = W0[n]
