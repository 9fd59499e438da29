"""The efficiency to expect (``time_cost.expected``, a model): ordered as the links are, and
each figure the chapter's cluster model's own."""

import pytest

from ddplab.chapters.time_cost import cluster_prediction, expected, utilisation


def test_faster_links_give_higher_efficiency_at_every_size():
    e = expected.run()
    rows = [e.efficiency[label] for label, *_ in expected.CLUSTERS]
    for size in e.sizes_millions:
        nvlink, pcie, infiniband, ethernet = (row[size] for row in rows)
        assert 1 >= nvlink >= pcie > ethernet > 0 and infiniband > ethernet
    assert "MODEL, not a measurement" in e.describe()


def test_a_row_is_the_cluster_models_step():
    e = expected.run(sizes_millions=(350,))
    label, accelerator, per_node, nodes, intra, inter = expected.CLUSTERS[2]
    p = cluster_prediction.run(params_millions=350, gpus_per_node=per_node, nodes=nodes,
                               intra=intra, inter=inter, accelerator=accelerator)
    assert e.efficiency[label][350] == p.step.efficiency


def test_every_row_computes_at_the_record_of_its_own_card():
    """H100 rows take the H100 record by name, not the newest (the H200's): issue 47 worked the
    table on the H100 record by hand, PCIe 95/91/78% and two InfiniBand nodes 90/73/62%."""
    e = expected.run()
    assert set(e.records.values()) == {"h100-2026-11-25"}
    assert e.utilisation[expected.CLUSTERS[0][0]][350] == utilisation.from_record(
        350e6, record="h100-2026-11-25").value
    text = e.describe()
    assert "measured on one NVIDIA H100 80GB HBM3" in text and "H200" not in text
    infiniband = e.efficiency["2 nodes x 8 H100, InfiniBand"]
    assert [round(100 * infiniband[m]) for m in e.sizes_millions] == [90, 73, 62]


def test_bad_input():
    with pytest.raises(ValueError, match="sizes_millions"):
        expected.run(sizes_millions=(0,))
