"""The efficiency to expect (``time_cost.expected``, a model): ordered as the links are, and
each figure the chapter's cluster model's own."""

import pytest

from ddplab.chapters.time_cost import cluster_prediction, cost_model, expected, utilisation


def test_faster_links_give_higher_efficiency_at_every_size():
    e = expected.run()
    rows = [e.efficiency[label] for label, *_ in expected.CLUSTERS]
    for size in e.sizes_millions:
        nvlink, pcie, one_nic, nic_per_gpu, ethernet = (row[size] for row in rows)
        assert 1 >= nvlink >= pcie > ethernet > 0 and nic_per_gpu > one_nic > ethernet
    assert "MODEL, not a measurement" in e.describe()


def test_a_row_is_the_cluster_models_step():
    e = expected.run(sizes_millions=(350,))
    label, accelerator, per_node, nodes, intra, inter = expected.CLUSTERS[2]
    p = cluster_prediction.run(params_millions=350, gpus_per_node=per_node, nodes=nodes,
                               intra=intra, inter=inter, accelerator=accelerator)
    assert e.efficiency[label][350] == p.step.efficiency


def test_every_row_computes_at_the_record_of_its_own_card():
    """H100 rows take the H100 record by name, not the newest (the H200's): a reviewer worked the
    table on the H100 record by hand, PCIe 95/91/78% and two InfiniBand nodes 90/73/62%."""
    e = expected.run()
    assert set(e.records.values()) == {"h100-2026-11-25"}
    assert e.utilisation[expected.CLUSTERS[0][0]][350] == utilisation.from_record(
        350e6, record="h100-2026-11-25").value
    text = e.describe()
    assert "measured on one NVIDIA H100 80GB HBM3" in text and "H200" not in text
    infiniband = e.efficiency["2 nodes x 8 H100, IB, 1 NIC/node"]
    assert [round(100 * infiniband[m]) for m in e.sizes_millions] == [90, 73, 62]


def test_each_row_prints_its_card_peak_and_links_and_the_pcie_row_a_pcie_cards_peak():
    e = expected.run(sizes_millions=(1000,))
    text = " ".join(e.describe().split())
    for label, accelerator, _, nodes, intra, inter in expected.CLUSTERS:
        chip = cost_model.ACCELERATORS[accelerator]
        assert (f"{label}: {chip.name} ({chip.flops / 1e12:.0f} TFLOP/s); {intra}; "
                f"{inter if nodes > 1 else 'no network'}") in text
    assert e.accelerators["1 node x 8 H100 PCIe"] == "H100 PCIe"
    assert cost_model.ACCELERATORS["H100 PCIe"].flops == 756e12
    # at the SXM's peak the same row computed faster, so its all-reduce weighed more
    at_sxm = cluster_prediction.run(1000, nodes=1, intra="PCIe 5 x16", accelerator="H100 SXM")
    assert e.efficiency["1 node x 8 H100 PCIe"][1000] > at_sxm.step.efficiency


def test_bad_input():
    with pytest.raises(ValueError, match="sizes_millions"):
        expected.run(sizes_millions=(0,))
