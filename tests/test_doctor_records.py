"""The records between the doctor's watchers and its judges: one frozen type per kind, a field
the type does not know refused where the record is made, and the same records back after the
trip through the store's JSON."""

import dataclasses
import json

import pytest

import ddplab.doctor.records as records
from ddplab.doctor.ranks.recorder import Recorder


def example(kind: type, start: int = 0):
    """A record of ``kind`` whose every field holds a value of its own (no two alike), so that
    a field dropped or swapped on the way shows; a field of parts holds two of them."""
    values = {}
    parts = getattr(kind, "PARTS", {})
    for i, field in enumerate(dataclasses.fields(kind), start):
        text = str(field.type)
        if field.name in parts:
            values[field.name] = [example(parts[field.name], 10 * i + n) for n in (1, 2)]
        elif text.startswith("bool"):
            values[field.name] = i % 2 == 0
        elif text.startswith("int"):
            values[field.name] = 100 + i
        elif text.startswith("float"):
            values[field.name] = 0.5 + i
        elif text.startswith("list"):
            values[field.name] = [i, f"item{i}"]
        elif text.startswith("dict"):
            values[field.name] = {f"key{i}": [i, 1.5]}
        else:
            values[field.name] = f"{field.name}-{i}"
    return kind(**values)


@pytest.mark.parametrize("kind", sorted(records.KINDS.values(), key=lambda k: k.KIND),
                         ids=lambda k: k.KIND)
def test_each_kind_comes_back_equal_from_the_stores_json(kind):
    record = example(kind)
    text = json.dumps(records.dump({kind.KIND: [record]}))
    back = records.load(json.loads(text))[kind.KIND][0]
    assert type(back) is kind and back == record
    assert back != dataclasses.replace(record, t=record.t + 1)  # equality is not vacuous


def test_the_registry_names_every_kind_once():
    kinds = [k.KIND for k in records.KINDS.values()]
    assert len(kinds) == len(set(kinds)) and all(kinds)
    assert {"pass", "collective", "step", "duplicate_rank", "group_init"} <= set(records.KINDS)


def test_a_misspelt_field_is_refused_where_the_watcher_makes_the_record():
    with pytest.raises(TypeError, match="batchs"):
        records.Pass(loader=0, number=0, len=4, file=None, line=None, batchs=2)


def test_a_field_or_kind_the_doctor_does_not_know_is_refused_when_read_back():
    fields = records.to_json(example(records.Write))
    with pytest.raises(ValueError, match="no field pth; its fields are .*path"):
        records.from_json("write", dict(fields, pth="x"))
    with pytest.raises(ValueError, match="no record kind 'writes'; the kinds are .*write"):
        records.from_json("writes", fields)


def test_a_step_comes_back_with_its_micro_steps_and_backwards_as_their_types():
    step = example(records.Step)
    back = records.from_json("step", json.loads(json.dumps(records.to_json(step))))
    assert isinstance(back.micro[0], records.MicroStep) and back.micro == step.micro
    assert isinstance(back.backwards[1], records.Backward) and back.backwards == step.backwards
    fields = records.to_json(step)
    fields["micro"][0]["synced"] = True
    with pytest.raises(ValueError, match="MicroStep has no field synced"):
        records.from_json("step", fields)


def test_a_record_is_frozen():
    record = example(records.Collective)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.after = [1.0]


def test_the_recorder_stamps_the_order_and_replaces_a_record_that_changes():
    rec = Recorder()
    rec.steps = 3
    first = rec.add(records.Pass(loader=0, number=0, len=4, file="train.py", line=7))
    other = rec.add(records.Write(path="/tmp/x", how="open", file="train.py", line=9))
    assert (first.step, first.t, other.t) == (3, 0, 1)
    grown = rec.update(first, batches=1, samples=8)
    assert rec.records["pass"] == [grown] and (grown.batches, grown.t) == (1, 0)
    assert first.batches == 0  # the record a reader already holds does not change
    with pytest.raises(ValueError, match="not a record this process kept"):
        rec.update(first, batches=2)
