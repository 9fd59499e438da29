"""Two torchrun nodes on this machine (``running.two_nodes``): the group they form is the one
the local pool forms at world size 2 (the same all-reduced sum of ranks, 0 + 1), nothing of it
listens beyond loopback, and each way the second node fails to join gives the message the
running page quotes: node ranks by address, not arrival; the store's read timeout for a node
that does not host it."""

from ddplab.chapters.running import listening, two_nodes


def test_two_torchrun_nodes_form_one_group_of_two_listening_on_loopback_only():
    nodes, seen = listening.while_running(lambda: two_nodes.run(timeout=180))
    assert nodes.exit_codes == [0, 0], nodes.printed
    beyond = sorted(str(s) for s in seen if s.beyond_loopback)
    assert not beyond, f"listening beyond loopback: {beyond}"
    # this process's rendezvous store, and the nodes' own (the group's store, gloo's pairs)
    assert len({s.pid for s in seen}) > 1, f"none of the nodes' sockets seen: {seen}"
    rows = [line.split() for line in nodes.printed.splitlines()[1:3]]
    assert [int(r[0]) for r in rows] == [0, 1]  # global ranks
    assert [int(r[1]) for r in rows] == [0, 0]  # each the only process of its node
    assert {int(r[2]) for r in rows} == {2} and {int(r[-1]) for r in rows} == {0 + 1}
    assert nodes.printed.rstrip().endswith("OK")
    assert all("--rdzv-backend c10d" in c for c in nodes.commands)


def test_a_port_where_nothing_listens_is_refused_then_times_out():
    refused = two_nodes.refused(timeout=1.0)
    assert "(errno: 111 - Connection refused)" in refused.traced
    assert refused.raised.startswith("The client socket has timed out after 1000ms")


def test_one_node_of_two_alone_ends_at_its_join_timeout_listening_on_loopback_only():
    last, seen = listening.while_running(lambda: two_nodes.alone(join_timeout=2))
    assert last.endswith("RendezvousTimeoutError")
    assert seen and not any(s.beyond_loopback for s in seen), seen


def test_node_ranks_follow_the_address_not_the_arrival_and_gloo_ignores_local_addr():
    """The node started first, at the address that sorts last, is node 1; both workers get
    node 0's --local-addr as the store's address, and gloo binds the host name's address,
    with no warning, whatever --local-addr says."""
    ranks, seen = listening.while_running(
        lambda: two_nodes.node_ranks(addresses=("127.0.0.3", "127.0.0.2"), delay=3.0))
    assert seen and not any(s.beyond_loopback for s in seen), seen
    assert ranks.node_ranks == [1, 0]
    assert ranks.store_address == ["127.0.0.2", "127.0.0.2"]
    assert ranks.gloo_address == [ranks.host_name_address] * 2 and not ranks.gloo_warned


def test_a_node_that_does_not_host_the_store_waits_only_its_read_timeout():
    line, seconds = two_nodes.timed(two_nodes.alone, join_timeout=600, hosts_store=False,
                                    read_timeout=2)
    assert line.split(":")[0].endswith("RendezvousConnectionError") and seconds < 120
