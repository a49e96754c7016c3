"""The tuner: the ``tune`` CLI, tuning sessions, schedule spaces, search, the cost model and analysis.

- :mod:`.session`: one ``tune run`` (model -> candidates -> choice -> compile);
- :mod:`.kernels`, :mod:`.choose`, :mod:`.compile`: kernels of a program, the program and
  schedules chosen, the chosen program compiled, verified and timed;
- :mod:`.space`, :mod:`.search`, :mod:`.cost_model`, :mod:`.analysis`: one package per concept;
- :mod:`.cli`: the ``tune`` command line (typer).
"""
