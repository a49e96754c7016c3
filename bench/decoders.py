"""Whole-model generation contenders, each timed in a process of its own: time to first token and decode steps.

A contender is an engine with two operations on token ids (never text):

- ``first_token(ids)``: a prompt on an empty KV cache, up to the chosen first token
  (greedy: the argmax of the last position's logits): the time to first token;
- ``decoder(cache_len)``: a KV cache holding ``cache_len - 1`` tokens, and a call that runs one
  decode step on it (the step's attention reads ``cache_len`` rows: the earlier tokens and
  its own) and returns its seconds; the cache is left as it was, so every step is at the
  same length.

Engines: :class:`Ours` (an artifact of :mod:`tuner.generate`, loaded with
:func:`tuner.generate.load`), :class:`Eager` (transformers with SDPA attention, its
default, on the checkpoint) and :class:`LlamaCpp` (``llama-cpp-python`` on a GGUF file).
:func:`time_contender` runs one in a ``spawn``ed process on ``threads`` threads and returns
its :class:`Timings`: medians over ``repeat`` prompts and ``repeat * steps`` decode steps,
after one warm-up of each. A contender that fails to build or crashes (a segfault
included) is reported with its first error line; the others go on.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Eager", "LlamaCpp", "Ours", "Plan", "Timings", "best_of", "time_contender"]


@dataclass(frozen=True)
class Plan:
    """What each contender is timed on: ``prompt`` (int64 ids ``[n]``) for the time to first token,
    decode at each of ``cache_lens`` (cache rows a step reads), ``repeat`` prompts and ``repeat * steps``
    steps per length, on ``threads`` threads."""

    prompt: tuple[int, ...]
    cache_lens: tuple[int, ...]
    repeat: int
    steps: int
    threads: int


@dataclass
class Timings:
    """One contender's figures (seconds); ``status`` ``ok``, else ``failed`` with ``error``."""

    name: str
    status: str = "ok"
    error: str = ""
    load_s: float | None = None
    ttft_s: list[float] = field(default_factory=list)
    decode_s: dict[int, list[float]] = field(default_factory=dict)

    @property
    def ttft_median_s(self) -> float | None:
        """Median seconds to the first token (None when not timed)."""
        return float(np.median(self.ttft_s)) if self.ttft_s else None

    def tokens_per_s(self, cache_len: int) -> float | None:
        """Decode tokens/s at ``cache_len``: one over the median step (None when not timed)."""
        steps = self.decode_s.get(cache_len)
        return 1.0 / float(np.median(steps)) if steps else None


def best_of(passes: list[Timings]) -> Timings:
    """One contender's passes merged: each figure from the pass whose median is best (a shorter time to first
    token, more tokens/s), so a busy spell of a shared machine during one pass does not count against it.

    A contender that failed in every pass is the last failure; ``load_s`` is the first ok pass's.

    Raises
    ------
    ValueError
        ``passes`` empty.
    """
    if not passes:
        raise ValueError("no passes to merge")
    ok = [t for t in passes if t.status == "ok"]
    if not ok:
        return passes[-1]
    out = Timings(ok[0].name, load_s=ok[0].load_s)
    out.ttft_s = min((t.ttft_s for t in ok if t.ttft_s), key=lambda v: float(np.median(v)), default=[])
    for cache_len in ok[0].decode_s:
        out.decode_s[cache_len] = min((t.decode_s[cache_len] for t in ok if t.decode_s.get(cache_len)),
                                      key=lambda v: float(np.median(v)), default=[])
    return out


class Ours:
    """The artifact directory ``artifact`` (:func:`tuner.generate.load`), its TVM runtime on ``threads`` threads."""

    def __init__(self, artifact: str, threads: int) -> None:
        os.environ["TVM_NUM_THREADS"] = str(threads)  # before the first kernel starts TVM's thread pool
        from tuner.generate import load

        self.model = load(artifact)

    def first_token(self, ids: np.ndarray) -> int:
        return self.model.generate(ids, 1).tokens[0]

    def decoder(self, cache_len: int):
        # the rows before the step are zeros: a step's work does not depend on what they hold
        caches = self.model.new_cache()

        def step() -> float:
            start = time.perf_counter()
            int(np.argmax(self.model.step(1, cache_len - 1, caches)))
            return time.perf_counter() - start

        return step


class Eager:
    """transformers' causal LM of the checkpoint directory ``checkpoint`` in float32, torch on ``threads`` threads.

    The prompt computes the last position's logits only (``logits_to_keep=1``, as
    ``generate`` does); a decode step's cache is cropped back after the step.
    """

    def __init__(self, checkpoint: str, threads: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()

    def _run(self, ids, cache=None):
        with self.torch.no_grad():
            return self.model(self.torch.as_tensor(ids)[None], cache=cache, use_cache=True, logits_to_keep=1)

    def first_token(self, ids: np.ndarray) -> int:
        return int(self._run(ids).logits[0, -1].argmax())

    def decoder(self, cache_len: int):
        cache = self._run(np.arange(cache_len - 1) % self.model.config.vocab_size).past_key_values

        def step() -> float:
            start = time.perf_counter()
            int(self._run(np.array([1]), cache).logits[0, -1].argmax())
            seconds = time.perf_counter() - start
            cache.crop(-1)  # the step's row out again
            return seconds

        return step


class LlamaCpp:
    """``llama_cpp.Llama`` on the GGUF file ``path`` with a context of ``n_ctx`` tokens and ``threads`` threads
    for decode and prompt, llama.cpp's defaults otherwise (its KV cache type and attention kernel)."""

    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=min(n_ctx, 2048), n_threads=threads,
                                   n_threads_batch=threads, verbose=False)

    def _argmax(self) -> int:
        logits = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self.llm.n_vocab(),))))

    def first_token(self, ids: np.ndarray) -> int:
        self.llm.reset()
        self.llm.eval(ids.tolist())
        return self._argmax()

    def decoder(self, cache_len: int):
        self.llm.reset()
        self.llm.eval((np.arange(cache_len - 1) % self.llm.n_vocab()).tolist())

        def step() -> float:
            start = time.perf_counter()
            self.llm.eval([1])
            self._argmax()
            seconds = time.perf_counter() - start
            self.llm.n_tokens = cache_len - 1  # the next eval drops the step's row from the KV cache
            return seconds

        return step


def _measure(engine_class: type, args: tuple, plan: Plan) -> Timings:
    """In the contender's process: build the engine, then time it as the module docstring says."""
    devnull = os.open(os.devnull, os.O_WRONLY)  # libraries' progress output must not mix with the caller's
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    out = Timings(engine_class.__name__)
    start = time.perf_counter()
    engine = engine_class(*args, plan.threads)
    out.load_s = time.perf_counter() - start
    prompt = np.asarray(plan.prompt, dtype=np.int64)
    engine.first_token(prompt)  # warm-up: code and pages loaded, thread pools started
    for _ in range(plan.repeat):
        start = time.perf_counter()
        engine.first_token(prompt)
        out.ttft_s.append(time.perf_counter() - start)
    for cache_len in plan.cache_lens:
        step = engine.decoder(cache_len)
        step()
        out.decode_s[cache_len] = [step() for _ in range(plan.repeat * plan.steps)]
    return out


def _serve(conn, engine_class: type, args: tuple, plan: Plan) -> None:
    """The contender's process: its :class:`Timings`, or ``("failed", error line)``, sent on ``conn``."""
    try:
        conn.send(("ok", _measure(engine_class, args, plan)))
    except Exception as exc:  # noqa: BLE001 - any failure of a contender is reported, not raised
        lines = str(exc).strip().splitlines()
        conn.send(("failed", f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"))


def time_contender(name: str, engine_class: type, args: tuple, plan: Plan, timeout_s: float = 3600.0) -> Timings:
    """``engine_class(*args, plan.threads)`` timed in a process of its own; a failure is a ``failed`` result."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_serve, args=(there, engine_class, args, plan), name=f"contender-{name}")
    proc.start()
    there.close()
    try:
        if not here.poll(timeout_s):
            return Timings(name, "failed", f"not done after {timeout_s:.0f} s")
        status, payload = here.recv()
    except EOFError:
        proc.join(10)
        return Timings(name, "failed", f"its process died (exit code {proc.exitcode}: a crash such as a "
                                       "segmentation fault when negative)")
    finally:
        if proc.is_alive():
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        here.close()
    if status != "ok":
        return Timings(name, "failed", payload)
    payload.name = name
    return payload
