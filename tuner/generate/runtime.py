"""The model that generates: compiled programs chained over the layers, a KV cache written in place.

Needs TVM's runtime and numpy only. The KV cache of a sequence is allocated once, as
two float32 arrays ``[layers, max_len, kv_heads, head_dim]`` (token-major), and each
call writes its new keys and values into rows ``[pos, pos + n)`` of each layer; the
attention program reads the prefix ``[0, L)`` of a layer as a view (DLPack, no copy),
with an additive mask that hides the rows past the valid length. See
:mod:`extract.programs` for the programs and :mod:`tuner.generate.buckets` for the shapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import tvm

from .buckets import bucket_for
from .manifest import ArtifactError

__all__ = ["Generation", "GeneratingModel", "Program"]

MASKED = float(np.finfo(np.float32).min)
"""The additive mask value of a hidden position (transformers uses the dtype's minimum too)."""


@dataclass
class Program:
    """One compiled program at one shape: ``call(*activations, *prepared weights)`` on the device."""

    name: str
    tokens: int
    cache: int
    call: object
    weights_key: str


@dataclass(frozen=True)
class Generation:
    """The result of :meth:`GeneratingModel.generate`.

    ``tokens``: the new token ids (the prompt not included), the EOS token included
    when it stopped generation. ``prefill_s``: seconds from the call to the first new
    token (time to first token). ``decode_s``: seconds of each decode step, one per
    token after the first. ``prompt_len``: tokens of the prompt.
    """

    tokens: list[int]
    prompt_len: int
    prefill_s: float
    decode_s: list[float] = field(default_factory=list)

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens per second of the prefill."""
        return self.prompt_len / self.prefill_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens per second of the median decode step, None when there was none."""
        return 1.0 / float(np.median(self.decode_s)) if self.decode_s else None


class GeneratingModel:
    """A decoder-only model built from compiled programs (see the module docstring).

    Parameters
    ----------
    config : dict
        The model's transformers config (``num_hidden_layers``, ``num_key_value_heads``,
        ``head_dim`` or ``hidden_size / num_attention_heads``, ``vocab_size``, ``eos_token_id``).
    programs : dict
        ``(program, tokens, cache) -> Program`` for every shape the buckets call.
    layer_weights : dict
        ``(program, weights_key) -> list`` over the layers (one list for ``head``) of the
        prepared weight tensors its ``Program.call`` takes after the activations.
    embedding : numpy.ndarray
        ``[vocab, hidden]`` float32 token embedding.
    max_len : int
        Tokens the KV cache holds: prompt plus generated tokens.
    buckets : tuple of int
        Compiled token counts and cache lengths.
    """

    def __init__(self, config: dict, programs: dict, layer_weights: dict, embedding: np.ndarray, max_len: int,
                 buckets: tuple[int, ...], device=None):
        self.config = config
        self.programs = programs
        self.layer_weights = layer_weights
        self.embedding = embedding
        self.max_len = max_len
        self.buckets = tuple(buckets)
        self.device = device or tvm.cpu()
        self.layers = int(config["num_hidden_layers"])
        self.vocab_size = int(config["vocab_size"])
        hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        self._cache_shape = (self.layers, max_len, int(config["num_key_value_heads"]), int(hd))

    # --- one call -----------------------------------------------------------------------------

    def _weights(self, program: Program, layer: int) -> list:
        return self.layer_weights[(program.name, program.weights_key)][layer]

    def _view(self, cache: np.ndarray, layer: int, rows: int):
        """Rows ``[0, rows)`` of one layer's cache as a TVM tensor sharing its memory."""
        return tvm.runtime.from_dlpack(cache[layer, :rows])

    def _forward(self, ids: np.ndarray, pos: int, caches: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Run ``ids`` (at positions ``pos..``) through every layer and the head; logits ``[vocab]`` of the last id.

        Writes the keys and values of the ``len(ids)`` tokens into rows ``pos..`` of the caches.
        """
        n = len(ids)
        if n == 1:
            tokens, cache_rows = 1, bucket_for(pos + 1, self.buckets)
        else:  # a prompt: padded to its bucket, attending over the rows written so far
            tokens = bucket_for(n, self.buckets)
            cache_rows = tokens
            if pos:
                raise ValueError("a prompt of several tokens is taken only at position 0")
        attn_in = self.programs[("attn_in", tokens, 0)]
        attn_out = self.programs[("attn_out", tokens, cache_rows)]
        padded = np.zeros(tokens, np.int64)
        padded[:n] = ids
        hidden = tvm.runtime.tensor(self.embedding[padded][None], self.device)
        positions = tvm.runtime.tensor(np.arange(pos, pos + tokens, dtype=np.int64)[None], self.device)
        rows = np.arange(pos, pos + tokens)[:, None]
        mask = np.where(np.arange(cache_rows)[None, :] <= rows, 0.0, MASKED).astype(np.float32)[None, None]
        mask = tvm.runtime.tensor(mask, self.device)
        keys, values = caches
        written = tokens if n > 1 else 1  # a prompt's padded rows too: rows past a query's position are masked
        for layer in range(self.layers):
            query, key, value = attn_in.call(hidden, positions, *self._weights(attn_in, layer))
            keys[layer, pos:pos + written] = key.numpy()[:written]
            values[layer, pos:pos + written] = value.numpy()[:written]
            hidden = attn_out.call(query, hidden, self._view(keys, layer, cache_rows),
                                   self._view(values, layer, cache_rows), mask, *self._weights(attn_out, layer))
            hidden = _single(hidden)
        head = self.programs[("head", 1, 0)]
        last = tvm.runtime.tensor(hidden.numpy()[:, n - 1:n], self.device)
        logits = _single(head.call(last, *self._weights(head, 0)))
        return logits.numpy().reshape(-1)

    def step(self, token: int, pos: int, caches: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """One decode step: ``token`` at position ``pos`` over cache rows ``[0, pos]``; float32 logits ``[vocab]``.

        Writes the token's keys and values into row ``pos`` of ``caches`` (:meth:`new_cache`);
        the rows before it are taken as they are. A benchmark times decode at a fixed cache
        length by calling it again at the same ``pos``.

        Raises
        ------
        ValueError
            ``pos + 1`` outside ``1..max_len``.
        """
        return self._forward(np.array([token], dtype=np.int64), pos, caches)

    # --- generation ---------------------------------------------------------------------------

    def new_cache(self) -> tuple[np.ndarray, np.ndarray]:
        """A KV cache for one sequence: keys and values ``[layers, max_len, kv_heads, head_dim]`` float32, zeros."""
        return _aligned_zeros(self._cache_shape), _aligned_zeros(self._cache_shape)

    def check_prompt(self, input_ids, max_new_tokens: int) -> np.ndarray:
        """``input_ids`` as int64 ``[n]``, checked against the vocabulary and the cache.

        Raises
        ------
        ValueError
            An empty prompt, ids outside ``0..vocab_size-1``, ``max_new_tokens`` below 1, or a
            prompt that with ``max_new_tokens`` would not fit the KV cache of ``max_len`` tokens.
        """
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("empty prompt: give at least one token id")
        bad = ids[(ids < 0) | (ids >= self.vocab_size)]
        if bad.size:
            raise ValueError(f"token id {int(bad[0])} outside the vocabulary 0..{self.vocab_size - 1}")
        if max_new_tokens < 1:
            raise ValueError(f"new tokens must be at least 1, got {max_new_tokens}")
        if ids.size > self.max_len:
            raise ValueError(f"prompt of {ids.size} tokens is longer than the maximum length {self.max_len}")
        if ids.size + max_new_tokens - 1 > self.max_len:
            raise ValueError(f"prompt of {ids.size} tokens plus {max_new_tokens} new tokens overflows the KV cache "
                             f"of {self.max_len} tokens (at most {self.max_len - ids.size + 1} new tokens)")
        return ids

    def generate(self, input_ids, max_new_tokens: int = 64, *, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, seed: int = 0, eos_token_id: int | list[int] | None = -1) -> Generation:
        """Generate up to ``max_new_tokens`` tokens after the prompt ``input_ids`` (ints ``[n]``).

        Greedy (the highest logit, the first on a tie) unless ``do_sample``: then each token
        is drawn from ``softmax(logits / temperature)`` restricted to the ``top_k`` highest
        logits, with numpy's generator seeded by ``seed``. Stops after an EOS token
        (``eos_token_id``: an id or ids; -1, the default, takes the config's; None: never)
        or ``max_new_tokens`` tokens. A fresh KV cache is allocated for the call.

        Raises
        ------
        ValueError
            As :meth:`check_prompt`, or a non-positive ``temperature`` or ``top_k``.
        """
        ids = self.check_prompt(input_ids, max_new_tokens)
        if do_sample and (temperature <= 0 or (top_k is not None and top_k < 1)):
            raise ValueError(f"sampling needs temperature > 0 and top_k >= 1, got {temperature} and {top_k}")
        eos = self.config.get("eos_token_id") if eos_token_id == -1 else eos_token_id
        stop = set() if eos is None else set(eos if isinstance(eos, list) else [eos])
        rng = np.random.default_rng(seed)

        def choose(logits: np.ndarray) -> int:
            if not do_sample:
                return int(np.argmax(logits))
            scaled = logits.astype(np.float64) / temperature
            if top_k is not None and top_k < scaled.size:
                scaled[scaled < np.partition(scaled, -top_k)[-top_k]] = -np.inf
            p = np.exp(scaled - scaled.max())
            return int(rng.choice(scaled.size, p=p / p.sum()))

        caches = self.new_cache()
        start = time.perf_counter()
        token = choose(self._forward(ids, 0, caches))
        result = Generation([token], int(ids.size), time.perf_counter() - start)
        pos = int(ids.size)
        while len(result.tokens) < max_new_tokens and token not in stop:
            start = time.perf_counter()
            token = choose(self._forward(np.array([token]), pos, caches))
            result.decode_s.append(time.perf_counter() - start)
            result.tokens.append(token)
            pos += 1
        return result


ALIGNMENT = 64
"""Bytes to which a tensor handed to TVM must be aligned (TVM's ``kAllocAlignment``; DLPack import checks it)."""


def _aligned_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """float32 zeros of ``shape`` starting at a multiple of :data:`ALIGNMENT` bytes.

    Raises
    ------
    ValueError
        A layer's rows (``shape[1:]``) whose size is not a multiple of the alignment,
        so that a layer's prefix view would not be aligned.
    """
    layer_bytes = int(np.prod(shape[1:])) * 4
    if layer_bytes % ALIGNMENT:
        raise ValueError(f"a KV cache layer of {layer_bytes} bytes is not a multiple of {ALIGNMENT} bytes")
    raw = np.zeros(int(np.prod(shape)) * 4 + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset:offset + int(np.prod(shape)) * 4].view(np.float32).reshape(shape)


def _single(value):
    """The one tensor of a program's output (a tensor, or a one-element tuple)."""
    if isinstance(value, tvm.runtime.Tensor):
        return value
    if len(value) != 1:
        raise ArtifactError(f"a program returned {len(value)} outputs where one was expected")
    return value[0]
