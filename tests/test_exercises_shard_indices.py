"""Exercise ``shard-indices``: the mistakes readers make are rejected, each named."""

import pytest

from exercise_cells import assert_rejected

SHARDS = {
    "no padding": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            return list(range(dataset_len))[rank::world_size]
        """, r"dataset_len=10, world_size=4.*rank 2: expected \[2, 6, 0\], got \[2, 6\]\. "
             r"No padding"),
    "contiguous blocks": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            n = dataset_len // world_size
            return list(range(rank * n, (rank + 1) * n))
        """, r"dataset_len=8, world_size=4.*rank 0: expected \[0, 4\], got \[0, 1\]\. "
             r"That is a contiguous block"),
    "drop_last ignored": ("""
        import math
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            n = math.ceil(dataset_len / world_size) * world_size
            return [i % dataset_len for i in range(n)][rank::world_size]
        """, r"drop_last=True.*That is the answer for drop_last=False"),
    "epoch ignored": ("""
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            import math
            g = torch.Generator().manual_seed(seed)
            idx = torch.randperm(dataset_len, generator=g).tolist() if shuffle \\
                else list(range(dataset_len))
            per = (math.ceil((dataset_len - world_size) / world_size)
                   if drop_last and dataset_len % world_size
                   else math.ceil(dataset_len / world_size))
            idx = (idx * 3)[:per * world_size] if not drop_last else idx[:per * world_size]
            return idx[rank::world_size]
        """, r"epoch=1.*That is epoch 0's order: .*seed \+ epoch"),
    "shuffled with Python's random": ("""
        import math
        import random
        def shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed):
            indices = list(range(dataset_len))
            if shuffle:
                random.Random(seed + epoch).shuffle(indices)
            per = (math.ceil((dataset_len - world_size) / world_size)
                   if drop_last and dataset_len % world_size
                   else math.ceil(dataset_len / world_size))
            total = per * world_size
            indices = indices[:total] if drop_last else (indices * 3)[:total]
            return indices[rank:total:world_size]
        """, r"shuffle=True.*Every case without shuffle passes and this shuffled one does not.*"
             r"torch\.randperm\(dataset_len, generator=g\).*seed \+ epoch"),
}


@pytest.mark.parametrize("kind", list(SHARDS))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, match = SHARDS[kind]
    assert_rejected("shard-indices", source, match)
