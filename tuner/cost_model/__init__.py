"""The cost model: what ranks schedule candidates and prices kernels and e-nodes.

- :mod:`.xgb`: the XGBoost model and the feature layout (``featurize``, ``FEATURE_VERSION``);
- :mod:`.trace_features`: features of a candidate's schedule trace;
- :mod:`.dataset`: the training set read from a tuning database;
- :mod:`.evaluate`: grouped cross-validation and ranking metrics;
- :mod:`.store`: warm start from, and saving to, the database's model versions;
- :mod:`.roofline`: the analytical fallback with too few measurements;
- :mod:`.node_prices`: e-node prices for extraction from tuned kernels.
"""
