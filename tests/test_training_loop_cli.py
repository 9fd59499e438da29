"""The training-loop chapter's commands from the terminal: gather-metric's JSON against a
one-process AUC computed here, and gather-metric under torchrun giving the local pool's numbers."""

import numpy as np
import pytest

from conftest import ddplab_json
from ddplab.chapters.training_loop import evaluation


def one_process_auc(dataset_size: int, seed: int) -> float:
    """AUC of the whole validation set by the rank-sum (Mann-Whitney) formula, not the pair
    count evaluation.auc uses (the scores are continuous: no ties)."""
    scores, labels = evaluation.validation_set(dataset_size, seed)
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    n_pos, n_neg = int(labels.sum()), int((1 - labels).sum())
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def test_gather_metric_cli_json():
    data = ddplab_json("gather-metric", "--world-size", "3", "--dataset-size", "10")
    assert data["metric_one_process"] == pytest.approx(one_process_auc(10, 0))
    assert data["metric_gathered"] == pytest.approx(data["metric_one_process"])
    assert data["predictions_per_rank"] == [4, 3, 3]  # 10 samples, no padding
    # DistributedSampler pads to 3 x 4 = 12 by repeating samples 0 and 1: another AUC
    assert data["padded_predictions"] == 12
    assert data["metric_padded_sampler"] != pytest.approx(data["metric_one_process"])


def test_under_torchrun_the_same_numbers_as_the_local_pool():
    """One of the chapter's commands under torchrun (each torchrun start costs about 7 s here;
    the rank functions are the same functions either way)."""
    args = ("--dataset-size", "9")
    local = ddplab_json("gather-metric", "--world-size", "2", *args)
    launched = ddplab_json("gather-metric", *args, torchrun=2)
    for field in ("metric_one_process", "metric_gathered", "metric_padded_sampler",
                  "predictions_per_rank"):
        np.testing.assert_allclose(launched[field], local[field], rtol=1e-6, atol=1e-9,
                                   err_msg=field)
