"""llama.cpp as a generation peer: a checkpoint converted to GGUF F32, quantized to Q8_0 and Q4_0, run by
``llama-cpp-python``.

The peer is optional (the ``bench`` extra's documentation gives the build flags): without
the ``llama_cpp`` package, or without llama.cpp's converter, its rows say why and the rest
of the benchmark runs. Three pieces:

- :func:`write_tokenizer`: a byte-level BPE tokenizer with merges (the ``tokenizers``
  library), saved beside a ``save_pretrained`` checkpoint of random weights, so that
  llama.cpp's ``convert_hf_to_gguf.py`` takes the directory. The contenders are fed token
  ids, never text, so the tokenizer only has to be one the converter accepts: its BPE
  pre-tokenizer is declared ``qwen2`` (the converter identifies a pre-tokenizer by the hash of
  a test string's tokens and refuses one it does not know, see :func:`convert`).
- :func:`convert` and :func:`quantize`: the converter (from a llama.cpp source tree, the
  ``vendor/llama.cpp`` directory of the ``llama-cpp-python`` sdist: ``--llama-cpp-dir`` or
  ``$LLAMA_CPP_DIR``) writes the F32 GGUF; ``llama_cpp.llama_model_quantize`` writes Q8_0
  and Q4_0 from it, with llama.cpp's own per-tensor choices (a tied embedding that is also
  the output layer gets Q6_K, or Q8_0 where its rows are not a multiple of 256).
- :func:`gguf_tensor_bytes`: each tensor's bytes in a GGUF file (llama.cpp's ``gguf-py``
  reader), for the bytes a decode step reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["FORMATS", "converter_dir", "convert", "gguf_tensor_bytes", "installed", "quantize", "write_tokenizer"]

FORMATS = ("F32", "Q8_0", "Q4_0")
"""llama.cpp's weight formats the benchmark runs (file types ``ALL_F32``, ``MOSTLY_Q8_0``, ``MOSTLY_Q4_0``)."""

CONVERTER = "convert_hf_to_gguf.py"
ENV = "LLAMA_CPP_DIR"
INSTALL = ("llama-cpp-python is not installed: CMAKE_ARGS='<the flags in the README's Benchmarks section>' "
           "pip install --no-binary llama-cpp-python llama-cpp-python")
#: the tokenizer's vocabulary: small, the converter pads the rest of the config's vocabulary with unused tokens
TOKENIZER_VOCAB = 512


def installed() -> str | None:
    """None when ``llama_cpp`` imports, else why not (with how to install it)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return INSTALL
    except OSError as exc:  # the package is there, its shared library does not load
        return f"llama-cpp-python's library does not load ({exc})"
    return None


def converter_dir(given: str | None = None) -> tuple[Path | None, str]:
    """The llama.cpp source tree holding ``convert_hf_to_gguf.py`` and ``gguf-py``, or None and why not.

    ``given`` (``--llama-cpp-dir``), else ``$LLAMA_CPP_DIR``.
    """
    text = given or os.environ.get(ENV)
    if not text:
        return None, (f"llama.cpp's converter not found: give --llama-cpp-dir or ${ENV} (a llama.cpp source tree, "
                      "such as the vendor/llama.cpp directory of the llama-cpp-python sdist: the README's "
                      "Benchmarks section says how)")
    path = Path(text).expanduser().resolve()
    if not (path / CONVERTER).is_file() or not (path / "gguf-py").is_dir():
        return None, f"{path} holds no {CONVERTER} and gguf-py: not a llama.cpp source tree"
    return path, ""


def write_tokenizer(directory: Path | str, vocab_size: int = TOKENIZER_VOCAB) -> None:
    """Save a byte-level BPE tokenizer with merges into ``directory`` (``tokenizer.json`` and its config).

    Trained by the ``tokenizers`` library on this module's own source text, ``vocab_size``
    tokens at most (the 256 bytes plus merges); it must not exceed the model's vocabulary.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(Path(__file__).read_text().splitlines(), trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(directory))


#: the converter run with its BPE pre-tokenizer check answered: ``qwen2``, whatever the tokens' hash
_RUN_CONVERTER = """
import runpy, sys
root = sys.argv.pop(1)
sys.path[:0] = [root, root + "/gguf-py"]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv[0] = root + "/convert_hf_to_gguf.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(checkpoint: Path | str, out: Path | str, llama_dir: Path, timeout_s: float = 1800.0) -> Path:
    """Convert a ``save_pretrained`` checkpoint (with :func:`write_tokenizer`'s tokenizer) to a GGUF F32 file.

    Runs llama.cpp's ``convert_hf_to_gguf.py --outtype f32`` in a subprocess, its BPE
    pre-tokenizer declared ``qwen2`` (the module docstring says why).

    Raises
    ------
    RuntimeError
        The converter failed (its last output line).
    """
    cmd = [sys.executable, "-c", _RUN_CONVERTER, str(llama_dir), str(checkpoint), "--outtype", "f32",
           "--outfile", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not Path(out).is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"convert_hf_to_gguf.py failed (exit {proc.returncode}): {tail[0]}")
    return Path(out)


def quantize(source: Path | str, out: Path | str, fmt: str, threads: int) -> Path:
    """Quantize the F32 GGUF ``source`` to ``fmt`` (``Q8_0`` or ``Q4_0``) with ``llama_model_quantize``.

    Raises
    ------
    ValueError
        ``fmt`` not one of ``Q8_0``, ``Q4_0``.
    RuntimeError
        llama.cpp's quantizer returned an error status.
    """
    import llama_cpp

    ftypes = {"Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}
    if fmt not in ftypes:
        raise ValueError(f"no quantization to {fmt!r}: one of {', '.join(ftypes)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftypes[fmt]
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize to {fmt} returned {status}")
    return Path(out)


def gguf_tensor_bytes(path: Path | str, llama_dir: Path) -> dict[str, int]:
    """Bytes of each tensor in the GGUF file ``path`` under its GGUF name (``token_embd.weight``, ...).

    Read by llama.cpp's own reader (``gguf-py``'s ``GGUFReader``) from the source tree ``llama_dir``.
    """
    sys.path.insert(0, str(llama_dir / "gguf-py"))
    try:
        from gguf import GGUFReader
    finally:
        sys.path.remove(str(llama_dir / "gguf-py"))
    return {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
