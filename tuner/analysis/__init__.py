"""Analysis of a tuning database: the logic behind the notebooks and ``tune report``.

- :mod:`.tables`: ``load`` a database into ``TuningData`` and the tables drawn from it;
- :mod:`.cost_model`: the stored cost model against the measurements;
- :mod:`.roofline`: tuned kernels against measured peaks;
- :mod:`.plots`: matplotlib figures of those tables;
- :mod:`.report`: every figure as PNG files and one ``index.html``.
"""
