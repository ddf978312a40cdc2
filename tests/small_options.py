"""Per-method options small enough for a fit of a few seconds on a tiny network; the tests
that run every registered method import them (a method missing here runs with defaults). The
experimental samplers (chees, mclmc, pathfinder: opt-in, not registered by default) have theirs in
tests/test_samplers.py."""

SMALL_OPTIONS = {
    "map": {"num_steps": 200},
    "advi": {"num_steps": 200, "num_samples": 40},
    "bbb": {"epochs": 200, "num_samples": 40},
    "ensemble": {"members": 2, "num_steps": 200},
    "laplace": {"num_steps": 200, "num_samples": 40},
    "mc_dropout": {"num_steps": 200, "num_samples": 40},
    "nuts": {"num_chains": 1, "num_warmup": 50, "num_samples": 40},
    "sgld": {"num_chains": 2, "burn_in": 100, "num_samples": 20, "thinning": 1},
    "swag": {"pretrain_steps": 100, "swag_epochs": 4, "batch_size": 10, "rank": 2, "num_samples": 20},
    "vd": {"epochs": 200, "num_samples": 40, "kl_warmup_epochs": 0},
    "multiswag": {"pretrain_steps": 100, "swag_epochs": 4, "batch_size": 10, "rank": 2, "num_samples": 10, "members": 2},
}
