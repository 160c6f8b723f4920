"""Shared by the fake-quantization simulations (bench/attn_int8_sim.py, bench/int8_linear_sim.py):
all-MiniLM-L6-v2 in transformers, the golden sentences, and their embeddings as the model gives
them (mean pooling, L2). Bench-only (the bench venv)."""
import json

import torch
from transformers import AutoModel, AutoTokenizer

M = "models/all-MiniLM-L6-v2"


def load(**kw):
    """The tokenizer and the model (in eval mode, 2 threads); kw go to from_pretrained."""
    torch.set_num_threads(2)
    return AutoTokenizer.from_pretrained(M), AutoModel.from_pretrained(M, **kw).eval()


def golden_sentences():
    return json.load(open("tests/golden/embeddings.json"))["sentences"]


def embed(tok, model, texts):
    """The texts' embeddings as the model gives them now, 32 a batch."""
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            b = tok(texts[i:i + 32], padding=True, truncation=True, max_length=256,
                    return_tensors="pt")
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            e = (h * m).sum(1) / m.sum(1)
            out.append(torch.nn.functional.normalize(e, dim=-1))
    return torch.cat(out).numpy()
