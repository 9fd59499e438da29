"""The efficiency to expect (``time_cost.expected``, a model): ordered as the links are, and
each figure the chapter's cluster model's own."""

import pytest

from ddplab.chapters.time_cost import cluster_prediction, expected


def test_faster_links_give_higher_efficiency_at_every_size():
    e = expected.run()
    rows = [e.efficiency[label] for label, *_ in expected.CLUSTERS]
    for size in e.sizes_millions:
        nvlink, pcie, infiniband, ethernet = (row[size] for row in rows)
        assert 1 >= nvlink >= pcie > ethernet > 0 and infiniband > ethernet
    assert "MODEL, not a measurement" in e.describe()


def test_a_row_is_the_cluster_models_step():
    e = expected.run(sizes_millions=(350,))
    label, per_node, nodes, intra, inter = expected.CLUSTERS[2]
    p = cluster_prediction.run(params_millions=350, gpus_per_node=per_node, nodes=nodes,
                               intra=intra, inter=inter)
    assert e.efficiency[label][350] == p.step.efficiency


def test_bad_input():
    with pytest.raises(ValueError, match="sizes_millions"):
        expected.run(sizes_millions=(0,))
