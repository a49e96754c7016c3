"""Resolving a target: the TVM target and its database record, the same way for every caller.

``tune run``, ``tune model``, ``tune simulate`` and the benchmarks all name a target
as TVM JSON (or leave it out for this machine's CPU) and a device key (or leave it
out for the embedded worker's); :func:`resolve_target` turns that into one
:class:`ResolvedTarget`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import tvm

from database import TargetRecord
from measure.rpc import LOCAL_KEY
from measure.tvmapi import host_cpu, make_target, target_json


def default_target(cores: int | None = None) -> dict:
    """This machine's CPU as an LLVM target with ``cores`` threads (default: all its cores)."""
    return {"kind": "llvm", "mcpu": host_cpu(), "num-cores": cores or os.cpu_count() or 1}


@dataclass(frozen=True)
class ResolvedTarget:
    """A TVM target and the record the tuning database files its measurements under.

    Attributes
    ----------
    target : tvm.target.Target
        What kernels are built for.
    record : database.TargetRecord
        Its canonical JSON and the device key (RPC key) of the workers that measure it.
    """

    target: tvm.target.Target
    record: TargetRecord

    @property
    def target_hash(self) -> str:
        """The database key of the target and device key (SHA-256 hex)."""
        return self.record.target_hash


def resolve_target(spec: str | dict | tvm.target.Target | None = None, key: str | None = None) -> ResolvedTarget:
    """The target ``spec`` (TVM JSON text, a dict or a target; None: :func:`default_target`) measured by workers of
    ``key``.

    ``key`` None is the embedded worker's key (``measure.LOCAL_KEY``).

    Raises
    ------
    ValueError
        When TVM refuses the target (the message names it).
    """
    target = spec if isinstance(spec, tvm.target.Target) else make_target(spec if spec else default_target())
    return ResolvedTarget(target, TargetRecord(target_json(target), key or LOCAL_KEY))
