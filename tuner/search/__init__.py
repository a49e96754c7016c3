"""The search over schedules: rank, measure a batch, learn; confirm the leaders; replay.

- :mod:`.search`: one kernel's search loop (``tune_kernel``, ``SearchConfig``, ``ModelTrainer``);
- :mod:`.stop`: why a kernel's search stopped (``SearchStop``);
- :mod:`.measuring`: measuring one batch of candidates (claim, build, run, record);
- :mod:`.confirm`: re-measuring a kernel's fastest candidates before one is chosen;
- :mod:`.simulate`: replaying a database's measurements to compare strategies without hardware.
"""
