"""Embedding providers behind one interface: the local model, an OpenAI-compatible endpoint, none.

Every provider turns texts into L2-normalised float32 vectors (rows of a numpy array), so the
vector store can rank by cosine whatever produced them. ``model_id`` names the vectors: stored
vectors whose id differs from the configured provider's are stale and get re-embedded.

- ``LocalEmbedder``: all-MiniLM-L6-v2, int8 ONNX, run by onnxruntime with the model's own
  WordPiece tokenizer (``tokenizers``). No network and no PyTorch. The model files are built by
  ``make model`` (``build/make_model.py``) into ``appliance/search/model/`` and ship in the binary.
  One onnxruntime thread per run: measured 3.4 ms per query, and it leaves the second core to
  SQLite and HTTP (two threads fight the event loop's thread on a 2-core machine). A backfill's
  batches may run on several threads at once (``embeddings_backfill_threads``).
- ``HttpEmbedder``: POST ``{base}/embeddings`` as OpenAI defines it (OpenRouter, Ollama,
  llama.cpp's server, TEI, vLLM...). It holds no transport code: it is handed a ``Poster``,
  which gateway/ wires to the egress path (``gateway/semantic_egress.py``: guard, pinned
  connect, no redirects, one deadline), and it asks for the answer under a byte cap sized from
  the request (``answer_cap``). Every failure (unreachable, refused by the guard, status,
  timeout, over the cap, malformed body, wrong count or dimension, non-finite numbers) is an
  ``EmbeddingError`` with a reason that names no secret.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from appliance.search.asks import Ask

MODEL_DIR = Path(__file__).resolve().parent / "model"
MODEL_FILE = "minilm-l6-v2-int8.onnx"
LOCAL_DIM = 384
# Texts are cut at 128 word pieces, the length the model was trained at (sentence-transformers
# allows 256): on the dev queries the cut costs nothing (mean nDCG@10 of the four sets +0.0005),
# and a long description embeds in about half the time.
MAX_TOKENS = 128
# Texts are embedded one per forward pass. Dynamic int8 quantisation scales activations per
# batch, so a text embedded beside others came out slightly different (cosine 0.992) from the
# same text alone; one at a time, a tool's vector depends on its text only (as its hash
# promises) and matches how queries are embedded. Batching bought nothing on 1 thread here.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# An endpoint's answer is read under a byte cap sized from the request, so a broken or hostile
# endpoint cannot make a search (or the backfill) hold an unbounded body. A number as a JSON
# encoder writes it takes at most 24 characters (float64's longest, "-2.2250738585072014e-308";
# float32 encoders write fewer); 40 bytes a number leaves room for the comma and for
# pretty-printed answers (a newline and indentation per number). Without
# ``embeddings_dimensions`` the width is unknown until the answer arrives: 8192 is twice the
# widest common models' 4096. Each item adds its keys ("object", "index", "embedding"), and the
# envelope ("model", "usage", an error text) gets 64 KiB. One query, width unknown: 384 KiB;
# a backfill batch of 32 texts: 10.1 MiB.
ANSWER_BYTES_PER_NUMBER = 40
ANSWER_MAX_DIMENSIONS = 8192
ANSWER_BYTES_PER_ITEM = 256
ANSWER_ENVELOPE_BYTES = 64 * 1024


class EmbeddingError(Exception):
    """The provider could not embed; ``reason`` is safe to show and log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Embedder(Protocol):
    model_id: str

    async def embed(self, texts: Sequence[str], *, timeout_s: float) -> np.ndarray:
        """One L2-normalised float32 row per text, in order."""
        ...

    async def embed_query(
        self, text: str, asks: Sequence[Ask], *, timeout_s: float
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """A search request's vector and one per ask in it (``search/asks.py``): None for an
        ask the provider could not place (past the local model's cut)."""
        ...

    async def aclose(self) -> None: ...


def normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32)


def local_model_available(model_dir: Path = MODEL_DIR) -> bool:
    return (model_dir / MODEL_FILE).is_file() and (model_dir / "tokenizer.json").is_file()


def _digest(path: Path) -> str:
    """The model file's hash, once per process and file version: with the local model on by
    default every runtime opened (a CLI command, each test's) would otherwise hash 20 MB."""
    stat = path.stat()
    return _hash_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _hash_of(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


class LocalEmbedder:
    """The bundled model; loaded on first use (about 0.3 s), then shared."""

    def __init__(self, model_dir: Path = MODEL_DIR, threads: int = 1, bulk_threads: int = 1):
        if not local_model_available(model_dir):
            raise EmbeddingError(f"the local model is not installed in {model_dir} (run `make model`)")
        self._dir = model_dir
        self._threads = threads
        digest = _digest(model_dir / MODEL_FILE)
        # int8 results differ slightly between CPUs, so the id also carries the model file's hash.
        # The cut is part of the id: changing it re-embeds the catalogue.
        self.model_id = f"local/all-MiniLM-L6-v2-int8@{digest}/{MAX_TOKENS}"
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        # Queries get a thread of their own, so a search never waits behind a backfill batch.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        # Batches (the backfill) are shared among ``bulk_threads`` threads, each embedding its
        # texts one at a time through the one session (onnxruntime runs are thread-safe): the
        # vectors are bit for bit those of one thread, since each text is still its own run.
        self._bulk_threads = max(1, bulk_threads)
        self._bulk = ThreadPoolExecutor(max_workers=self._bulk_threads, thread_name_prefix="embed-bulk")

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        with self._lock:
            if self._session is not None:
                return
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self._threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            tok = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
            tok.no_padding()
            tok.enable_truncation(MAX_TOKENS)
            self._tokenizer = tok
            self._session = ort.InferenceSession(
                str(self._dir / MODEL_FILE), sess_options=opts, providers=["CPUExecutionProvider"]
            )

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Embed in this thread (the CLI's backfill and the bench call this directly)."""
        if self._session is None:
            self._load()
        out = np.zeros((len(texts), LOCAL_DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            # ``encode``, not ``encode_batch``: the batch call hands one text to a thread pool.
            ids = self._tokenizer.encode(text or " ").ids
            feed = np.asarray([ids], dtype=np.int64)
            inputs = {"input_ids": feed, "attention_mask": np.ones_like(feed)}
            out[row] = self._session.run(["embeddings"], inputs)[0][0]
        return out

    def embed_query_sync(self, text: str, asks: Sequence[Ask]) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """The request's vector, exactly as ``embed_sync`` gives it, and each ask's from the same
        run: the mean of the last layer's states of the ask's word pieces, normalised (what the
        graph does for the whole text). On the dev queries that kept three quarters of what
        embedding each ask alone gained (docs/search.md, "Asks"), without a run of the model per
        ask (2.7 ms each at the median). An ask past the cut has no pieces: None."""
        if self._session is None:
            self._load()
        encoding = self._tokenizer.encode(text or " ")
        feed = np.asarray([encoding.ids], dtype=np.int64)
        vector, states = self._session.run(None, {"input_ids": feed, "attention_mask": np.ones_like(feed)})
        # Special pieces ([CLS], [SEP]) have empty offsets and belong to no ask.
        spans = [(i, start, end) for i, (start, end) in enumerate(encoding.offsets) if end > start]
        pooled: list[np.ndarray | None] = []
        for ask in asks:
            rows = [i for i, start, end in spans if start >= ask.start and end <= ask.end]
            if not rows:
                pooled.append(None)
                continue
            mean = states[0, rows].mean(axis=0)
            pooled.append((mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32))
        return vector[0].astype(np.float32), pooled

    async def warm(self) -> None:
        """Load the model now (about 0.3 s), outside any search's deadline."""
        if self._session is None:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._load)

    async def embed(self, texts: Sequence[str], *, timeout_s: float) -> np.ndarray:
        loop = asyncio.get_running_loop()
        try:
            # Loading is local and bounded; only the embedding itself counts against the
            # deadline, or the first search after start would trip the breaker.
            await self.warm()
            if len(texts) == 1:
                return await asyncio.wait_for(
                    loop.run_in_executor(self._pool, self.embed_sync, list(texts)), timeout_s
                )
            share = min(self._bulk_threads, len(texts))
            parts = [list(texts[i::share]) for i in range(share)]
            done = await asyncio.wait_for(
                asyncio.gather(*(loop.run_in_executor(self._bulk, self.embed_sync, p) for p in parts)),
                timeout_s,
            )
            out = np.zeros((len(texts), LOCAL_DIM), dtype=np.float32)
            for i, rows in enumerate(done):
                out[i::share] = rows
            return out
        except TimeoutError:
            raise EmbeddingError(f"the local model took longer than {timeout_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 - an onnxruntime failure must not fail a search
            raise EmbeddingError(f"the local model failed: {type(exc).__name__}") from None

    async def embed_query(
        self, text: str, asks: Sequence[Ask], *, timeout_s: float
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        loop = asyncio.get_running_loop()
        try:
            await self.warm()
            run = functools.partial(self.embed_query_sync, text, asks)
            return await asyncio.wait_for(loop.run_in_executor(self._pool, run), timeout_s)
        except TimeoutError:
            raise EmbeddingError(f"the local model took longer than {timeout_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 - an onnxruntime failure must not fail a search
            raise EmbeddingError(f"the local model failed: {type(exc).__name__}") from None

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._bulk.shutdown(wait=False, cancel_futures=True)


class Poster(Protocol):
    """How ``HttpEmbedder`` reaches its endpoint; gateway/ wires it to the egress path
    (``gateway/semantic_egress.py``), so this module holds no transport code."""

    async def post(
        self, url: str, headers: Mapping[str, str], body: bytes, *, timeout_s: float, max_bytes: int
    ) -> tuple[int, bytes]:
        """The status and the whole body (at most ``max_bytes``, within ``timeout_s``);
        EmbeddingError, with a reason that names no secret, when no such answer came."""
        ...

    async def aclose(self) -> None: ...


def answer_cap(count: int, dimensions: int | None) -> int:
    """The most bytes an honest answer for ``count`` texts can take (see ANSWER_* above)."""
    per_text = (dimensions or ANSWER_MAX_DIMENSIONS) * ANSWER_BYTES_PER_NUMBER + ANSWER_BYTES_PER_ITEM
    return ANSWER_ENVELOPE_BYTES + count * per_text


class HttpEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint, reached through ``poster``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        poster: Poster,
        *,
        api_key: str | None = None,
        dimensions: int | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise EmbeddingError("the embeddings URL must start with http:// or https://")
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dimensions = dimensions
        self._poster = poster
        self.model_id = f"http/{model}" + (f"@{dimensions}" if dimensions else "")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def __repr__(self) -> str:  # the headers hold the key: never show them
        return f"HttpEmbedder({self.model_id!r})"

    async def embed(self, texts: Sequence[str], *, timeout_s: float) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        body: dict[str, Any] = {"model": self._model, "input": list(texts)}
        if self._dimensions:
            body["dimensions"] = self._dimensions
        cap = answer_cap(len(texts), self._dimensions)
        status, content = await self._poster.post(
            self._url, self._headers, orjson.dumps(body), timeout_s=timeout_s, max_bytes=cap
        )
        if status != 200:
            raise EmbeddingError(f"the embeddings endpoint answered HTTP {status}")
        return self._parse(content, len(texts))

    async def embed_query(
        self, text: str, asks: Sequence[Ask], *, timeout_s: float
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        # An endpoint has no token states to share: the asks ride in the request's own call.
        rows = await self.embed([text, *(a.text for a in asks)], timeout_s=timeout_s)
        return rows[0], list(rows[1:])

    def _parse(self, content: bytes, count: int) -> np.ndarray:
        try:
            doc = orjson.loads(content)
            items = sorted(doc["data"], key=lambda d: int(d.get("index", 0)))
            rows = [d["embedding"] for d in items]
        except Exception:  # noqa: BLE001 - any malformed body is one kind of failure
            raise EmbeddingError("the embeddings endpoint answered with a malformed body") from None
        if len(rows) != count:
            raise EmbeddingError(f"the embeddings endpoint returned {len(rows)} vectors for {count} texts")
        dims = {len(r) if isinstance(r, list) else -1 for r in rows}
        if len(dims) != 1 or min(dims) <= 0:
            raise EmbeddingError("the embeddings endpoint returned vectors of differing dimensions")
        dim = dims.pop()
        if self._dimensions and dim != self._dimensions:
            raise EmbeddingError(
                f"the embeddings endpoint returned {dim} dimensions, expected {self._dimensions}"
            )
        try:
            wide = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise EmbeddingError("the embeddings endpoint returned non-numeric vectors") from None
        # Checked in float64: a value beyond float32's range would turn into inf on the cast.
        if not np.all(np.isfinite(wide)) or float(np.abs(wide).max()) > _FLOAT32_MAX:
            raise EmbeddingError("the embeddings endpoint returned non-finite numbers")
        return normalise(wide.astype(np.float32))

    async def aclose(self) -> None:
        await self._poster.aclose()
