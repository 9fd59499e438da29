"""Exercise ``bucketed-ddp``: the mistakes readers make are rejected, each named."""

import pytest

from ddplab import exercises
from exercise_cells import assert_rejected

BUCKETS_BASE = exercises.bucketed_ddp.BucketedDDP
BUCKETED = {
    "buckets all-reduced only at the end": ("""
        class BucketedDDP(Answer):
            def _grad_ready(self, p):
                pass

            def finish_gradient_synchronization(self):
                for i, bucket in enumerate(self.buckets):
                    flat = torch.cat([q.grad.flatten() for q in bucket])
                    self.pending.append((i, flat, dist.all_reduce(flat, async_op=True)))
                super().finish_gradient_synchronization()
        """, r"every all-reduce started after backward had produced all 4 gradients"),
    "one all-reduce per parameter": ("""
        class BucketedDDP(Answer):
            def __init__(self, module, bucket_size_mb):
                super().__init__(module, 0.0)  # every parameter a bucket of its own
        """, r"bucket_size_mb=0.009766.*4 all-reduces on rank 0, expected 2.*one per "
             r"parameter is not bucketing"),
    "sum without the division": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                for i, flat, work in self.pending:
                    work.wait()  # and no division
                    offset = 0
                    for q in self.buckets[i]:
                        q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                        offset += q.numel()
                self.pending, self.ready = [], [0] * len(self.buckets)
        """, r"every gradient, on every rank, is 2 times the right one: summed over the ranks "
             r"but not divided by the world size \(2\); or the gradient was added twice"),
    "counts never reset between steps": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                ready = self.ready
                super().finish_gradient_synchronization()
                self.ready = ready
        """, r"step 2: 0 all-reduces on rank 0, expected 2, one per bucket, while step 1 "
             r"launched 2: .*kept its value from step 1\. Reset that state for the next step"),
    "a hook that writes .grad before autograd adds it": ("""
        class BucketedDDP(Answer):
            def __init__(self, module, bucket_size_mb):
                super().__init__(module, bucket_size_mb)
                for p in self.bucket_of:  # and the answer's post-accumulate hooks stay
                    p.register_hook(lambda g, p=p: self._write(p, g))

            def _write(self, p, g):
                p.grad = g.clone()  # autograd then adds g to it: twice the gradient
        """, r"every gradient, on every rank, is 2 times the right one: .*or the gradient was "
             r"added twice: a hook registered with register_hook runs before autograd"),
    "a bucket copied back in reverse": ("""
        class BucketedDDP(Answer):
            def finish_gradient_synchronization(self):
                for i, flat, work in self.pending:
                    work.wait()
                    flat /= dist.get_world_size()
                    offset = 0
                    for q in reversed(self.buckets[i]):  # not the order it was flattened in
                        q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                        offset += q.numel()
                self.pending, self.ready = [], [0] * len(self.buckets)
        """, r"step 1: the gradient of '0.weight' on rank 0 is the right gradient of "
             r"'2.weight': '0.weight' received the gradient of '2.weight'"),
}


@pytest.mark.parametrize("kind", list(BUCKETED))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, match = BUCKETED[kind]
    assert_rejected("bucketed-ddp", source, match, Answer=BUCKETS_BASE)
