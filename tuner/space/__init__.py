"""The design space of one kernel: TVM ``s_tir`` schedule candidates and the seeds put first.

- :mod:`.space`: :class:`~tuner.space.space.ScheduleSpace`, a kernel's candidates (the
  default schedule, the seeds, samples and mutants of MetaSchedule's post-order-apply rules);
- :mod:`.gemm_seeds`: register-blocked GEMM micro-kernels;
- :mod:`.gemv_seeds`: split-k decode GEMVs on a row-major weight;
- :mod:`.row_seeds`: row-wise schedules of row reductions (softmax, RMSNorm);
- :mod:`.attention_seeds`: fused attention one query row at a time.
"""
