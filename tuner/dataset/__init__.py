"""The cost model's data set grown from every run: the collector and the sources it measures.

``tune dataset collect`` (:mod:`tuner.dataset.collect`) measures schedules of
workloads drawn from every shipped architecture and size (:mod:`tuner.dataset.plan`)
into a tuning database; ``tune dataset export`` writes them to the versioned file
(:mod:`database.dataset_file`) that lives in ``tuner/cost_model/pretrained/``.
"""
