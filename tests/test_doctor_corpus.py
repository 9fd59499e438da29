"""The doctor over its corpus: scripts written the way readers write them (the PyTorch DDP
tutorial's torchrun and mp.spawn scripts, nanoGPT's loop, a Hugging Face-style manual loop,
plain ones), each with known mistakes or none.

Every script runs once, under the doctor, on 2 real gloo ranks (two at a time, forked from one
shared zygote); each test then reads its diagnosis. A buggy script gives exactly its errors
(and its waste and advisories), a clean one none, and each test shows from the run's own
evidence, against torch computed here, that the bug is real.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddplab.doctor.launch import launcher
from ddplab.doctor.launch.diagnose import diagnose
from ddplab.doctor.launch.processes import Zygote
from ddplab.doctor.reporting import output, page, text
from doctor_support import CORPUS, MARK, checkout_status, new_mark, processes_with

# script -> (arguments, errors, other findings (waste, advisory), doctor settings); a name with
# "#" is the script before it, run a second time with other settings
EXPECTED = {
    "tutorial_torchrun.py": (["3", "1"], {"sampler-set-epoch"}, {"lr-not-scaled"}, {}),
    "tutorial_torchrun_clean.py": (["3", "1"], set(), set(), {}),
    "tutorial_spawn.py": (["3", "1"], {"every-rank-writes"}, set(), {}),
    "tutorial_spawn_clean.py": (["3", "1"], set(), set(), {}),
    "nanogpt_clean.py": ([], set(), set(), {}),
    "nanogpt_unsynced.py": ([], {"accumulation-unsynced-step"}, set(), {}),
    "nanogpt_two_bugs.py": ([], {"accumulation-loss-not-divided", "every-rank-writes"}, set(),
                           {}),
    "hf_loop.py": ([], set(), {"accumulation-no-sync", "lr-not-scaled"}, {}),
    "hf_loop_metric.py": ([], {"metric-mean-of-means"}, set(), {}),
    "hf_loop_two_bugs.py": ([], {"clip-before-unscale", "metric-mean-of-means"},
                            {"lr-not-scaled", "reference-differs"}, {}),
    "plain_clean.py": ([], set(), set(), {}),
    "plain_no_sampler.py": ([], {"no-distributed-sampler"}, set(), {}),
    "plain_rank0_barrier.py": ([], {"collective-on-some-ranks"}, {"lr-not-scaled"},
                               {"timeout": 3.0}),
    "plain_nccl_cpu.py": ([], {"cpu-tensor-nccl", "same-batches"}, set(), {}),
    "plain_amp_clip.py": ([], {"clip-before-unscale"}, {"lr-not-scaled"}, {}),
    "plain_eval_padded.py": ([], {"metric-mean-of-means"}, {"reference-differs"}, {}),
    "plain_bn_buffers.py": ([], {"replicas-diverge"}, set(), {}),
    "plain_ema_copy.py": ([], {"replicas-diverge"}, set(), {}),
    "plain_load_rank0.py": ([], {"replicas-diverge", "same-batches"}, set(), {}),
    "plain_unused_param.py": ([], {"find-unused-parameters", "same-batches"}, set(), {}),
    "plain_find_unused_true.py": ([], {"same-batches"}, {"find-unused-parameters"}, {}),
    "plain_uneven.py": ([], {"uneven-inputs"}, set(), {}),
    "plain_crash.py": ([], set(), set(), {}),
    "blog_fixed_rank.py": ([], {"duplicate-rank"}, set(), {}),
    "cuda_hardcoded.py": ([], set(), set(), {}),
    "crash_sampler_shuffle.py": ([], {"known-crash"}, set(), {}),
    "crash_module_prefix.py": ([], {"known-crash"}, {"lr-not-scaled"}, {}),
    "crash_sync_batchnorm_cpu.py": ([], {"known-crash"}, set(), {}),
    "local_rank_argparse.py": ([], {"no-process-group"}, set(), {}),
    "local_rank_device.py": ([], {"known-crash"}, set(), {}),
    "local_rank_none.py": ([], {"known-crash"}, set(), {}),
    "tail_prefix_load.py": ([], {"known-crash"}, {"lr-not-scaled"}, {}),
    "eval_gather_interleaved.py": ([], set(), set(), {}),
    "eval_gather_concat.py": ([], {"metric-mean-of-means"}, set(), {"world_size": 3}),
    "log_opened_by_every_rank.py": ([], set(), {"every-rank-writes"}, {}),
    "plain_unused_sometimes.py": ([], {"find-unused-parameters"}, set(), {}),
    "plain_randint_same_seed.py": ([], {"same-batches"}, set(), {}),
    "nanogpt_same_seed.py": ([], {"same-batches"}, set(), {}),
    "sampler_seed_per_rank.py": ([], {"overlapping-shards"}, set(), {}),
    "eval_rank0_through_ddp.py": ([], {"collective-on-some-ranks"}, set(), {"timeout": 3.0}),
    "plain_unwrapped_forward.py": ([], {"replicas-diverge"}, {"reference-differs"}, {}),
    "plain_data_parallel.py": ([], {"replicas-diverge"}, set(), {}),
    "plain_rank0_eval_allreduce.py": ([], {"collective-on-some-ranks"}, set(), {}),
    "plain_grads_reduced_twice.py": ([], set(), {"gradients-reduced-twice"}, {}),
    "hf_split_unseeded.py": ([], {"different-datasets"}, set(), {}),
    "plain_logging_syncs.py": ([], set(), {"barrier-every-step"}, {}),
    "plain_mkdir_every_rank.py": ([], {"every-rank-writes"}, set(), {}),
    "plain_logged_sum.py": ([], {"logged-sum-not-divided"}, {"reference-differs"}, {}),
    "amp_skipped_steps.py": ([], set(), set(), {}),
    "save_module_prefix.py": ([], set(), {"state-dict-prefix"}, {}),
    "resume_ddp_state.py": ([], set(), {"lr-not-scaled"}, {}),
    "onecycle_dataset_steps.py": ([], {"schedule-length"}, set(), {}),
    "onecycle_loader_steps.py": ([], set(), set(), {}),
    "stream_islice_uneven.py": ([], {"uneven-inputs"}, set(), {}),
    "stream_islice_even.py": ([], set(), set(), {}),
    "epoch_loss_dataset_len.py": ([], {"mean-over-global-count"}, {"reference-differs"}, {}),
    "epoch_loss_reduced.py": ([], set(), set(), {}),
    "ref_clean.py": ([], set(), set(), {}),
    "ref_batchnorm.py": ([], set(), set(), {}),
    "ref_metric_shard.py": ([], set(), {"reference-differs"}, {}),  # a ratio no factor: advice
    "ref_loss_divided_twice.py": ([], {"reference-differs"}, set(), {}),
    "ref_loss_times_world.py": ([], {"reference-differs"}, set(), {}),
    "ref_grads_summed.py": ([], {"reference-differs"}, {"gradients-reduced-twice"}, {}),
    "ref_lr_one_rank.py": ([], {"replicas-diverge"}, {"reference-differs"}, {}),
    "ref_unwrapped_forward.py": ([], {"replicas-diverge"}, {"reference-differs"}, {}),
    # rank 0 prints its own last loss: the reference run says so, as advice
    "epoch_last_loss.py": ([], set(), {"reference-differs"}, {}),
    "epoch_last_loss.py#steps16": ([], set(), {"reference-differs"}, {"steps": 16}),
    "weights_folder.py": ([], set(), set(), {}),
    "gather_scalar_nccl.py": ([], set(), set(), {}),
    "hf_device_gather.py": ([], set(), set(), {}),
    "hf_device_gather_cpu_count.py": ([], {"cpu-tensor-nccl"}, set(), {}),
    "epoch_counts_batches.py": ([], set(), set(), {}),
    "spawn_sets_world_size.py": ([], set(), set(), {}),  # its own WORLD_SIZE kept for mp.spawn
    "device_from_index.py": ([], set(), set(), {}),
    "cuda_no_set_device.py": ([], {"ranks-share-gpu"}, set(), {}),
    "custom_sampler_epoch.py": ([], {"sampler-set-epoch"}, set(), {}),
    "custom_sampler_epoch_clean.py": ([], set(), set(), {}),
    "scheduler_rank0.py": ([], {"replicas-diverge"}, {"reference-differs"}, {}),
    "eval_rank0_sync_batchnorm.py": ([], {"collective-on-some-ranks"}, set(), {"timeout": 3.0}),
    "split_inside_dataset.py": ([], {"different-datasets"}, set(), {}),
    "vocab_every_rank.py": ([], {"read-while-written"}, {"every-rank-writes"}, {}),
}

# script -> what the reference run's finding says (its first step, the ratio, the cause)
REFERENCE_SAYS = {
    "ref_metric_shard.py": ["after optimizer step 4, rank 0 printed 'epoch 0: val accuracy",
                            "not a multiple of the world size"],
    "ref_loss_divided_twice.py": ["after optimizer step 1", "ratio 1/2",
                                  "divided by the world size once too often"],
    "plain_logged_sum.py": ["ratio 2: a sum over the 2 ranks, not divided"],
    "ref_loss_times_world.py": ["after optimizer step 1, rank 0's 0.weight [32, 10]",
                                "2 times the one process's", "multiplied by the world size"],
    "ref_grads_summed.py": ["after optimizer step 1", "2 times the one process's",
                            "summed over the ranks", "gradients-reduced-twice"],
    "ref_lr_one_rank.py": ["from optimizer step 5", "rank 1 at 0.1, rank 0 at 0.05",
                           "rank 1's 0.weight"],
    # the forward bypasses DDP in both runs: no chunks, so the difference is advice beside
    # replicas-diverge's error
    "ref_unwrapped_forward.py": ["after optimizer step 1", "did not run its forward through DDP"],
}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def diagnoses():
    """Every corpus script's diagnosis, the processes left behind (none, we hope), and whether
    the corpus and the checkout are as they were."""
    before = {p.name: _digest(p) for p in CORPUS.glob("*.py")}
    status = checkout_status()
    mark = new_mark()
    os.environ[MARK] = mark
    try:
        with tempfile.TemporaryDirectory() as logs:
            zygote = Zygote(launcher.base_environment(), os.path.join(logs, "zygote.log"))
            try:
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    futures = {name: pool.submit(_diagnose, name, zygote, logs)
                               for name in EXPECTED}
                    found = {name: f.result() for name, f in futures.items()}
            finally:
                zygote.close()
    finally:
        del os.environ[MARK]
    after = {p.name: _digest(p) for p in CORPUS.glob("*.py")}
    return {"by_script": found, "left": processes_with(mark), "unchanged": before == after,
            "status": (status, checkout_status())}


def _diagnose(name, zygote, logs):
    args, _, _, settings = EXPECTED[name]
    cwd = os.path.join(logs, name)  # what the script writes lands here
    os.makedirs(cwd)
    return diagnose(str(CORPUS / script_of(name)), args, zygote=zygote, cwd=cwd, **settings)


def script_of(name: str) -> str:
    return name.split("#")[0]


def ids(diagnosis, errors: bool) -> set[str]:
    return {f.id for f in diagnosis.findings if (f.kind == "error") == errors}


def finding(diagnosis, check_id: str):
    return next(f for f in diagnosis.findings if f.id == check_id)


FAILING = {"plain_crash.py", "epoch_counts_batches.py"}  # crashes no check explains


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - FAILING))
def test_exactly_its_findings(diagnoses, name):
    _, errors, others, _ = EXPECTED[name]
    diagnosis = diagnoses["by_script"][name]
    assert diagnosis.crash is None or diagnosis.crash_explained, diagnosis.crash
    assert ids(diagnosis, errors=True) == errors
    assert ids(diagnosis, errors=False) == others
    assert diagnosis.exit_code() == (1 if errors else 0)
    for f in diagnosis.findings:  # each finding names a line of the script and a fix
        assert f.file == str(CORPUS / script_of(name)) or f.file.startswith(str(CORPUS))
        assert f.line > 0 and f.fix and f.url.startswith("https://") and f.message


def test_nothing_left_and_nothing_changed(diagnoses):
    assert diagnoses["left"] == []
    assert diagnoses["unchanged"]


def test_the_checkout_is_left_as_it_was(diagnoses):
    """The scripts save checkpoints and models in their working folder: a temporary one, never
    the checkout (git status is the same before and after every corpus run)."""
    before, after = diagnoses["status"]
    assert after == before


def test_clean_script_checked_everything(diagnoses):
    diagnosis = diagnoses["by_script"]["plain_clean.py"]
    assert diagnosis.findings == []
    statuses = {v.id: v.status for v in diagnosis.checks}
    assert set(statuses.values()) <= {"passed", "not applicable"}
    for check in ("sampler-set-epoch", "no-distributed-sampler", "replicas-diverge",
                  "metric-mean-of-means", "every-rank-writes", "lr-not-scaled"):
        assert statuses[check] == "passed", check


def test_a_rank_written_into_the_script_is_named_at_once(diagnoses):
    """Every process passes rank=0: the group could never form (each would wait for rank 1
    until its store's timeout, the doctor's 60 s plus 30); the second claim of rank 0 ends the
    run at once, at the script's init_process_group line."""
    diagnosis = diagnoses["by_script"]["blog_fixed_rank.py"]
    f = finding(diagnosis, "duplicate-rank")
    source = (CORPUS / "blog_fixed_rank.py").read_text().splitlines()
    assert "dist.init_process_group(backend, rank=rank" in source[f.line - 1]
    assert f.evidence["rank"] == 0 and diagnosis.steps_run == 0
    assert diagnosis.outcome == "crashed" and diagnosis.seconds < 60


def test_set_epoch_same_order_both_epochs(diagnoses):
    f = finding(diagnoses["by_script"]["tutorial_torchrun.py"], "sampler-set-epoch")
    first, second = f.evidence["first_indices"]
    assert first == second and f.evidence["epochs"] == [0, 0]
    sampler = DistributedSampler(range(64), num_replicas=2, rank=0, shuffle=True, seed=0)
    assert list(sampler)[:8] == first  # torch's epoch-0 order, seen twice
    sampler.set_epoch(1)
    assert list(sampler)[:8] != first  # what set_epoch(1) would have given


def test_the_tutorials_json_and_page(diagnoses, tmp_path):
    """The report as ``--json --out DIR`` writes it, from the tutorial's diagnosis."""
    diagnosis = diagnoses["by_script"]["tutorial_torchrun.py"]
    data = json.loads(output.rendered(diagnosis, "json"))
    assert data["schema_version"] == 1 and data["world_size"] == 2
    # the tutorial takes its CUDA branch: is_available() is True for the script here
    assert (data["backend_requested"], data["backend_used"]) == ("nccl", "gloo")
    assert data["mapped"]["gpus"] == 0 and data["mapped"]["calls"]
    assert data["steps_run"] == 8 and data["exit_code"] == 1
    assert {"id", "status"} <= set(data["checks"][0])
    f = next(f for f in data["findings"] if f["id"] == "sampler-set-epoch")
    assert {"id", "kind", "message", "evidence", "file", "line", "section", "fix"} <= set(f)
    assert data["writes"] == {"0": ["snapshot.pt"]}  # what it would have written, by rank
    paths = page.write(diagnosis, str(tmp_path / "report"))
    assert json.loads(open(paths["json"]).read()) == data
    html = open(paths["html"]).read()
    assert "sampler-set-epoch" in html and "sampler.set_epoch(epoch)" in html
    assert "<script" not in html and "src=\"http" not in html and "src='http" not in html


def test_the_tutorials_github_annotations_and_sarif_at_the_scripts_line(diagnoses):
    """``--format github`` and ``--format sarif`` name the second epoch's loop."""
    diagnosis = diagnoses["by_script"]["tutorial_torchrun.py"]
    script = CORPUS / "tutorial_torchrun.py"
    source = script.read_text().splitlines()
    said = output.rendered(diagnosis, "github").splitlines()
    first = next(line for line in said if "sampler-set-epoch" in line)
    where = re.match(r"::error file=([^,]+),line=(\d+),title=ddplab doctor sampler-set-epoch::",
                     first)
    assert where and where.group(1) == str(script), first
    assert "for source, targets in" in source[int(where.group(2)) - 1]  # the second epoch's
    assert said[-1].startswith("ddplab doctor: ")  # the summary last
    results = json.loads(output.rendered(diagnosis, "sarif"))["runs"][0]["results"]
    result = next(r for r in results if r["ruleId"] == "sampler-set-epoch")
    located = result["locations"][0]["physicalLocation"]
    assert (result["level"], located["region"]["startLine"]) == ("error", int(where.group(2)))
    assert located["artifactLocation"]["uri"].endswith("tutorial_torchrun.py")


def test_no_sampler_every_rank_the_whole_dataset(diagnoses):
    f = finding(diagnoses["by_script"]["plain_no_sampler.py"], "no-distributed-sampler")
    assert f.evidence["samples_per_rank_per_epoch"] == f.evidence["dataset_len"] == 64


def test_rank0_barrier_hangs_and_is_named(diagnoses):
    diagnosis = diagnoses["by_script"]["plain_rank0_barrier.py"]
    assert diagnosis.outcome == "hang"
    f = finding(diagnosis, "collective-on-some-ranks")
    alarm = f.evidence["hang"]["alarm"]
    waiting = alarm["waiting"]
    assert alarm["rank"] == 0 and waiting["what"] == "barrier" and waiting["line"] == f.line
    assert alarm["waited"] >= 3.0  # the timeout passed: a real wait, not a guess
    counts = f.evidence["counts"]  # DDP's own collectives and rank 0's barrier
    assert counts[0] == counts[1] + 1 and f.evidence["calls"][1] is None
    assert "rank 1 has finished the script" in f.message


def test_cpu_tensor_under_nccl_is_refused(diagnoses):
    """The doctor's evidence: a CPU tensor in a collective of a group that asked for NCCL.
    Real: a group with no CPU backend (NCCL's shape, here gloo for CUDA only) refuses it."""
    f = next(f for f in diagnoses["by_script"]["plain_nccl_cpu.py"].findings
             if f.evidence.get("op") == "all_reduce")
    assert f.evidence["devices"] == ["cpu"] and f.evidence["requested"] == "nccl"
    code = ("import torch, torch.distributed as d\n"
            "d.init_process_group('cuda:gloo', store=d.HashStore(), rank=0, world_size=1)\n"
            "try:\n    d.all_reduce(torch.tensor(1.0))\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert "No backend type associated with device type cpu" in out.stdout


def test_clip_before_unscale_clips_the_scaled_norm(diagnoses):
    f = finding(diagnoses["by_script"]["plain_amp_clip.py"], "clip-before-unscale")
    e = f.evidence
    assert math.isclose(e["measured_norm"] / e["scale"], e["true_norm"], rel_tol=1e-6)
    assert e["true_norm"] < e["max_norm"] < e["measured_norm"]  # clipped, though not needed


def test_mean_of_means_differs_from_the_sample_mean(diagnoses):
    f = finding(diagnoses["by_script"]["hf_loop_metric.py"], "metric-mean-of-means")
    samples, values = f.evidence["samples"], f.evidence["values"]
    assert samples == {0: 21, 1: 20}  # 41 samples, rank r takes r, r + 2, ...
    plain = sum(values.values()) / 2
    weighted = sum(values[r] * samples[r] for r in samples) / 41
    assert plain == pytest.approx(f.evidence["mean_of_means"])
    assert weighted == pytest.approx(f.evidence["sample_mean"]) and weighted != plain


def test_padded_evaluation_counts_a_sample_twice(diagnoses):
    f = finding(diagnoses["by_script"]["plain_eval_padded.py"], "metric-mean-of-means")
    assert f.evidence["padded_to"] == 46 and f.evidence["dataset_len"] == 45
    shards = [list(DistributedSampler(range(45), num_replicas=2, rank=r, shuffle=False))
              for r in range(2)]
    seen = shards[0] + shards[1]
    assert len(seen) == 46 and seen.count(0) == 2  # sample 0 evaluated by both ranks


def test_accumulation_findings(diagnoses):
    waste = finding(diagnoses["by_script"]["hf_loop.py"], "accumulation-no-sync")
    assert waste.kind == "waste" and waste.evidence["allreduces_per_step"] == 2
    unsynced = finding(diagnoses["by_script"]["nanogpt_unsynced.py"],
                       "accumulation-unsynced-step")
    assert unsynced.evidence["synced"] == [True, False]  # the first micro-step only
    norms = unsynced.evidence["gradient_norms"]
    assert unsynced.evidence["differing_gradients"] and norms[0] != norms[1]
    summed = finding(diagnoses["by_script"]["nanogpt_two_bugs.py"],
                     "accumulation-loss-not-divided")
    assert summed.evidence["loss_factor"] == 1.0 and summed.evidence["micro_steps"] == 2


@pytest.mark.parametrize("name,what", [("plain_bn_buffers.py", "buffer"),
                                       ("plain_ema_copy.py", "parameter"),
                                       ("plain_load_rank0.py", "parameter")])
def test_replicas_differ(diagnoses, name, what):
    f = finding(diagnoses["by_script"][name], "replicas-diverge")
    sums = [v["sum"] for v in f.evidence["per_rank"].values()]
    assert f.evidence["what"] == what and sums[0] != sums[1]


def test_every_rank_writes_the_same_file(diagnoses):
    for name in ("tutorial_spawn.py", "nanogpt_two_bugs.py"):
        f = finding(diagnoses["by_script"][name], "every-rank-writes")
        assert f.evidence["ranks"] == [0, 1]


def test_unused_parameters_both_ways(diagnoses):
    crashed = diagnoses["by_script"]["plain_unused_param.py"]
    f = finding(crashed, "find-unused-parameters")
    assert f.evidence["unused"] == ["aux_head.bias", "aux_head.weight"]
    assert "Expected to have finished reduction" in crashed.crash.traceback  # DDP's own
    assert crashed.crash_explained and crashed.exit_code() == 1
    waste = finding(diagnoses["by_script"]["plain_find_unused_true.py"],
                    "find-unused-parameters")
    assert waste.kind == "waste" and waste.evidence["backwards_checked"] >= 2


def test_uneven_inputs_from_the_lengths(diagnoses):
    f = finding(diagnoses["by_script"]["plain_uneven.py"], "uneven-inputs")
    shards = [len(range(r, 65, 2)) for r in range(2)]  # 33 and 32 samples
    assert f.evidence["batches_per_rank"] == {r: math.ceil(n / 8) for r, n in enumerate(shards)}


def test_lr_not_scaled_numbers(diagnoses):
    f = finding(diagnoses["by_script"]["hf_loop.py"], "lr-not-scaled")
    assert f.kind == "advisory"
    assert f.evidence["global_batch"] == 2 * f.evidence["global_batch_one_rank"] == 32


def test_a_script_that_fails_on_its_own(diagnoses):
    diagnosis = diagnoses["by_script"]["plain_crash.py"]
    assert diagnosis.exit_code() == 2 and not diagnosis.crash_explained
    assert "Expected input batch_size (16) to match target batch_size (15)" in \
        diagnosis.crash.traceback
    assert "plain_crash.py" in diagnosis.crash.traceback
    assert "ddplab" not in diagnosis.crash.traceback  # the reader's frames only
    assert diagnosis.crash.changes == ()  # nothing of the doctor's in effect yet
    said = " ".join(text.report(diagnosis).split())
    assert "rank 0 failed on its own (no DDP check explains it)" in said


def test_a_crash_after_the_doctors_changes_is_possibly_its_own(diagnoses):
    """The script checks that each epoch went through its whole loader: epochs 0 and 1 do,
    the third is the doctor's one batch. The report names that change, not the script."""
    diagnosis = diagnoses["by_script"]["epoch_counts_batches.py"]
    crash = diagnosis.crash
    assert "epoch 2: 1 of 4 batches" in crash.error and not diagnosis.crash_explained
    assert crash.changes == ("training ended after step 8: each epoch since has one batch",)
    said = " ".join(text.report(diagnosis).split())
    assert "failed, possibly the doctor's doing" in said and "failed on its own" not in said
    sarif = json.loads(output.rendered(diagnosis, "sarif"))
    note = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]
    assert "possibly the doctor's doing" in note["message"]["text"]


def test_a_cuda_script_runs_unedited_on_cpu_ranks(diagnoses):
    """No GPU here: the script's mp.spawn(nprocs=torch.cuda.device_count()) starts the 2 ranks
    asked for, its CUDA runs on the CPU, NCCL as gloo, and the report's first line says what
    was mapped."""
    diagnosis = diagnoses["by_script"]["cuda_hardcoded.py"]
    assert diagnosis.world_size == 2 and diagnosis.steps_run == 8
    assert (diagnosis.backend_requested, diagnosis.backend_used) == ("nccl", "gloo")
    calls = {c["what"] for c in diagnosis.mapped["calls"]}
    assert {"torch.cuda.set_device", "model.cuda()", "DistributedDataParallel(device_ids=...)",
            "GradScaler('cuda') -> GradScaler('cpu')", ".cuda()", ".to('cuda')",
            "autocast('cuda') -> autocast('cpu', bfloat16)",
            "SyncBatchNorm (statistics all-reduced over gloo)",
            "torch.cuda.synchronize"} <= calls
    assert diagnosis.mapped["gpus"] == 0 and diagnosis.mapped["ranks"] == 2
    first = text.report(diagnosis).splitlines()[0]
    assert first.startswith("CUDA mapped onto the CPU (0 GPUs here for 2 ranks")
    collectives = next(v for v in diagnosis.checks if v.id == "cpu-tensor-nccl")
    assert collectives.status == "passed"  # the loss it all-reduces is on "cuda"


def test_a_tensor_the_author_left_on_the_cpu_is_still_found_under_nccl(diagnoses):
    """plain_nccl_cpu.py takes its CUDA branch here (is_available is True for the script): the
    model and batches go to "cuda", the logged loss is made on the CPU. Only that one is found."""
    diagnosis = diagnoses["by_script"]["plain_nccl_cpu.py"]
    assert diagnosis.mapped is not None
    found = [f for f in diagnosis.findings if f.id == "cpu-tensor-nccl"]
    source = (CORPUS / "plain_nccl_cpu.py").read_text().splitlines()
    assert [source[f.line - 1].strip() for f in found] == ["dist.all_reduce(logged)"]


@pytest.mark.parametrize("name,entry,line", [
    ("crash_sampler_shuffle.py", "errors-sampler-shuffle", "loader = DataLoader("),
    ("crash_module_prefix.py", "errors-state-dict-prefix", "evaluated.load_state_dict("),
    ("crash_sync_batchnorm_cpu.py", "errors-sync-batchnorm-cpu", "model = DDP("),
    ("local_rank_device.py", "errors-local-rank", "device = torch.device(\"cuda\", args."),
    ("local_rank_none.py", "errors-local-rank", "device = torch.device(f\"cuda:{args."),
])
def test_a_crash_the_book_explains_is_named_with_its_entry(diagnoses, name, entry, line):
    diagnosis = diagnoses["by_script"][name]
    f = finding(diagnosis, "known-crash")
    assert f.section == entry and f.url.endswith(f"errors.html#{entry}")
    assert diagnosis.crash_explained and diagnosis.exit_code() == 1
    source = (CORPUS / name).read_text().splitlines()
    assert source[f.line - 1].startswith(line)


def test_a_local_rank_option_torchrun_never_passes(diagnoses):
    """The script ran to its end undistributed: a finding (exit 1), not bad input (exit 2)."""
    diagnosis = diagnoses["by_script"]["local_rank_argparse.py"]
    f = finding(diagnosis, "no-process-group")
    assert f.evidence == {"option": "--local_rank", "default": -1}
    source = (CORPUS / "local_rank_argparse.py").read_text().splitlines()
    assert "--local_rank" in source[f.line - 1] and "LOCAL_RANK" in f.fix
    assert diagnosis.exit_code() == 1 and diagnosis.crash is None


def test_every_diagnosis_is_valid_sarif(diagnoses):
    """Each corpus script's diagnosis as SARIF 2.1.0 passes the standard's schema."""
    from test_doctor_formats import validate

    for name, diagnosis in diagnoses["by_script"].items():
        report = json.loads(output.rendered(diagnosis, "sarif"))
        validate(report)
        assert len(report["runs"][0]["results"]) == len(diagnosis.findings), name


def test_a_mistake_at_the_scripts_end_is_found_after_step_k(diagnoses):
    """After 8 steps (two epochs) training ends: the three epochs left run one batch each and
    their evaluation, and the script's end (save, barrier, load) runs on every rank, where the
    'module.' prefix load fails."""
    diagnosis = diagnoses["by_script"]["tail_prefix_load.py"]
    f = finding(diagnosis, "known-crash")
    source = (CORPUS / "tail_prefix_load.py").read_text().splitlines()
    assert source[f.line - 1] == "final.load_state_dict(torch.load(\"final.pt\"))"
    assert f.section == "errors-state-dict-prefix" and diagnosis.steps_run == 8
    said = diagnosis.output["rank0"]
    assert all(f"epoch {e}: validation loss" in said for e in range(5))  # every epoch ran


def verdict(diagnosis, check_id: str):
    return next(v for v in diagnosis.checks if v.id == check_id)


def test_gathered_and_interleaved_holds_each_sample_once(diagnoses):
    """Accelerate's gather_for_metrics pattern: the padded repeat is cut off, no finding."""
    diagnosis = diagnoses["by_script"]["eval_gather_interleaved.py"]
    v = verdict(diagnosis, "metric-mean-of-means")
    assert v.status == "passed" and "hold each of the 41 samples once" in v.why
    shards = [list(DistributedSampler(range(41), num_replicas=2, rank=r, shuffle=False))
              for r in range(2)]
    interleaved = [i for pair in zip(*shards) for i in pair][:41]
    assert sorted(interleaved) == list(range(41))  # torch's shards, as the script cuts them


def test_gathered_rank_by_rank_repeats_a_sample(diagnoses):
    f = finding(diagnoses["by_script"]["eval_gather_concat.py"], "metric-mean-of-means")
    e = f.evidence
    assert e["repeated"] == [0] and e["missing"] == [38] and e["samples"] == 40
    shards = [list(DistributedSampler(range(40), num_replicas=3, rank=r, shuffle=False))
              for r in range(3)]
    cut = (shards[0] + shards[1] + shards[2])[:40]
    assert cut.count(0) == 2 and 38 not in cut  # what the run showed, from torch's sampler
    assert "torch.stack(gathered, dim=1)" in f.fix  # the fix keeps the gather
    assert "barrier" not in f.message


def test_log_emptied_by_every_rank_is_an_advisory(diagnoses):
    f = finding(diagnoses["by_script"]["log_opened_by_every_rank.py"], "every-rank-writes")
    assert f.kind == "advisory" and f.evidence["writers"] == [0]
    assert "cannot tell" in f.message
    assert 'open(path, "w") if dist.get_rank() == 0' in f.fix  # a log's fix, not a checkpoint's


def test_replicas_are_not_compared_after_ddp_fails(diagnoses):
    diagnosis = diagnoses["by_script"]["plain_unused_sometimes.py"]
    assert "Expected to have finished reduction" in diagnosis.crash.traceback
    assert verdict(diagnosis, "replicas-diverge").status == "not applicable"


def test_same_batches_on_every_rank(diagnoses):
    """Same seed, batches drawn with torch.randint: every rank draws the same indices."""
    diagnosis = diagnoses["by_script"]["plain_randint_same_seed.py"]
    f = finding(diagnosis, "same-batches")
    # every forward before the stop (8 steps, and the forward of the 9th, stopped at its step)
    compared = f.evidence["forwards_compared"]
    assert f.evidence["seed"] == 0 and f.evidence["same_step"] == {1: compared} and compared >= 8
    assert verdict(diagnosis, "lr-not-scaled").status == "not applicable"  # no 16 samples
    source = (CORPUS / "plain_randint_same_seed.py").read_text().splitlines()
    assert "torch.manual_seed(0)" in source[f.line - 1]
    nanogpt = finding(diagnoses["by_script"]["nanogpt_same_seed.py"], "same-batches")
    assert nanogpt.evidence["shared"][1] * 2 >= nanogpt.evidence["forwards_compared"]
    assert nanogpt.evidence["seed"] == 1337
    assert verdict(diagnoses["by_script"]["nanogpt_clean.py"], "same-batches").status == \
        "passed"


def test_overlapping_shards_from_seeds_by_rank(diagnoses):
    f = finding(diagnoses["by_script"]["sampler_seed_per_rank.py"], "overlapping-shards")
    shards = [set(DistributedSampler(range(64), num_replicas=2, rank=r, seed=42 + r))
              for r in range(2)]
    assert f.evidence["shared"] == len(shards[0] & shards[1]) > 0
    assert f.evidence["unseen"] == 64 - len(shards[0] | shards[1])
    assert f.evidence["seeds"] == {0: 42, 1: 43}


def test_rank0_evaluation_through_ddp_meets_a_barrier(diagnoses):
    """Rank 0's DDP forward broadcasts the buffers; rank 1 is in the barrier after it."""
    diagnosis = diagnoses["by_script"]["eval_rank0_through_ddp.py"]
    f = finding(diagnosis, "collective-on-some-ranks")
    calls = f.evidence["calls"]
    assert calls[0]["by"] == "DDP's broadcast of rank 0's buffers before a forward"
    assert calls[1]["op"] == "barrier" and calls[1]["by"] is None
    source = (CORPUS / "eval_rank0_through_ddp.py").read_text().splitlines()
    assert "model(Xv)" in source[f.line - 1] and "model.module(inputs)" in f.fix


@pytest.mark.parametrize("name,cause", [
    ("plain_unwrapped_forward.py", "no forward before step 1 went through the DDP"),
    ("plain_data_parallel.py", "is an nn.DataParallel")])
def test_replicas_by_the_optimizers_parameters(diagnoses, name, cause):
    f = finding(diagnoses["by_script"][name], "replicas-diverge")
    sums = [v["sum"] for v in f.evidence["per_rank"].values()]
    assert f.evidence["step"] == 1 and sums[0] != sums[1] and cause in f.message
    source = (CORPUS / name).read_text().splitlines()
    assert "model(xb)" in source[f.line - 1]


def test_a_collective_met_by_ddps_gradient_all_reduce(diagnoses):
    """Gloo aborts rank 0 (its evidence never leaves the process); its ledger in the doctor's
    store still shows its all-reduce meeting rank 1's gradient all-reduce, with both lines."""
    diagnosis = diagnoses["by_script"]["plain_rank0_eval_allreduce.py"]
    said = diagnosis.crash.traceback  # whichever side gloo failed first
    assert diagnosis.crash_explained and any(text in said for text in (
        "Connection reset by peer", "Connection closed by peer", "collective mismatch"))
    f = finding(diagnosis, "collective-on-some-ranks")
    calls = f.evidence["calls"]
    source = (CORPUS / "plain_rank0_eval_allreduce.py").read_text().splitlines()
    assert calls[0]["by"] is None and "dist.all_reduce(counts)" in source[calls[0]["line"] - 1]
    assert calls[1]["by"] == "DDP's all-reduce of the gradients"
    assert ".backward()" in source[calls[1]["line"] - 1]


def test_gradients_all_reduced_after_ddp_did(diagnoses):
    f = finding(diagnoses["by_script"]["plain_grads_reduced_twice.py"], "gradients-reduced-twice")
    sizes = [6 * 16, 16, 16 * 2, 2]  # the two Linear layers' weights and biases
    assert f.kind == "waste" and f.evidence["gradients"] == f.evidence["parameters"] == 4
    assert f.evidence["numbers"] == sum(sizes) and f.evidence["reduce"] == "SUM"
    verdict_clean = verdict(diagnoses["by_script"]["plain_clean.py"], "gradients-reduced-twice")
    assert verdict_clean.status == "passed"


def test_a_split_made_unseeded_on_every_rank(diagnoses):
    """Each rank is a process of its own, seeded by the OS as torchrun's are (not the doctor's
    zygote's state): the unseeded split differs, and the Subsets' index digests show it."""
    f = finding(diagnoses["by_script"]["hf_split_unseeded.py"], "different-datasets")
    prints = f.evidence["fingerprints"]
    assert prints[0] != prints[1] and all(p.startswith("subset:") for p in prints.values())
    assert f.evidence["dataset_len"] == 80


def test_a_barrier_before_every_step(diagnoses):
    f = finding(diagnoses["by_script"]["plain_logging_syncs.py"], "barrier-every-step")
    assert f.evidence["barriers_per_step"] == 1 and f.evidence["small_collectives_per_step"] == 3
    assert f.evidence["steps"] == diagnoses["by_script"]["plain_logging_syncs.py"].steps_run
    clean = verdict(diagnoses["by_script"]["plain_clean.py"], "barrier-every-step")
    assert clean.status == "passed"  # a barrier once an epoch, after the checkpoint


def test_a_folder_every_rank_creates(diagnoses):
    """Whichever rank comes second fails with FileExistsError; the finding explains it."""
    diagnosis = diagnoses["by_script"]["plain_mkdir_every_rank.py"]
    assert "FileExistsError" in diagnosis.crash.error and diagnosis.crash_explained
    f = finding(diagnosis, "every-rank-writes")
    assert f.evidence["ranks"] == [0, 1] and f.evidence["how"] == "mkdir"
    assert f.evidence["path"].endswith("checkpoints/epoch-0")
    assert f.evidence["failed"] == diagnosis.crash.rank


def test_a_printed_sum_of_the_ranks_means(diagnoses):
    f = finding(diagnoses["by_script"]["plain_logged_sum.py"], "logged-sum-not-divided")
    values, total = f.evidence["values"], f.evidence["sum"]
    assert total == pytest.approx(sum(values.values()), rel=1e-6)
    assert f"{total:.4f}" in f.evidence["printed"]  # what rank 0 printed: the sum
    assert f.evidence["mean"] == pytest.approx(total / 2)


def test_steps_a_grad_scaler_skips_are_steps_not_micro_steps(diagnoses):
    """On an H200 in float16, a GradScaler skipped the first steps of a clean script and the
    doctor read the backwards of several steps as one step's micro-steps (accumulation errors).
    Here the scaler skips steps on the CPU too (the script prints how many), and the doctor
    counts each as a step of the loop: 8 steps, and no accumulation finding."""
    diagnosis = diagnoses["by_script"]["amp_skipped_steps.py"]
    skipped = int(diagnosis.output["rank0"].split("steps skipped by the scaler: ")[1])
    assert skipped >= 2 and diagnosis.steps_run == 8
    status = {c.id: c.status for c in diagnosis.checks}
    assert status["accumulation-loss-not-divided"] == "not applicable"


def test_a_state_dict_saved_with_ddps_names(diagnoses):
    """skj092's script saves ddp_model.state_dict() and never loads it: advice, with the key the
    plain model cannot load (shown with torch here). The tutorial's checkpoint, loaded back
    into the DDP model, and the scripts that crash on the prefix (known-crash) get none."""
    import torch

    advice = finding(diagnoses["by_script"]["save_module_prefix.py"], "state-dict-prefix")
    assert advice.kind == "advisory" and advice.evidence["keys"] == 4
    assert advice.evidence["first_key"] == "module.fc1.weight"
    plain = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match='Unexpected key.*"module.weight"'):
        plain.load_state_dict({f"module.{k}": v for k, v in plain.state_dict().items()})
    for name in ("resume_ddp_state.py", "crash_module_prefix.py", "tail_prefix_load.py"):
        status = {c.id: c.status for c in diagnoses["by_script"][name].checks}
        assert status["state-dict-prefix"] == "passed", name


def test_a_schedule_sized_from_the_whole_dataset(diagnoses):
    """total_steps = 3 epochs x 64 // 8 = 24; each rank's loader gives 4 batches an epoch
    (its len(), what a whole epoch gives), so the ranks walk 12 steps of the 24, and torch's
    OneCycleLR after 12 of 24 steps is still near its peak."""
    f = finding(diagnoses["by_script"]["onecycle_dataset_steps.py"], "schedule-length")
    e = f.evidence
    shard = DataLoader(range(64), batch_size=8, sampler=DistributedSampler(
        range(64), num_replicas=2, rank=0))
    assert e["length"] == 3 * 64 // 8 == 24 and e["epochs"] == 3 and e["epochs_counted"]
    assert e["batches_per_epoch"] == {0: len(shard), 1: len(shard)} == {0: 4, 1: 4}
    assert e["walked"] == {0: 12, 1: 12}
    source = (CORPUS / "onecycle_dataset_steps.py").read_text().splitlines()
    assert "OneCycleLR(" in source[f.line - 1] and "len(train_loader)" in f.fix
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.2)
    walked = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.2, total_steps=24)
    for _ in range(12):
        optimizer.step()
        walked.step()
    assert walked.get_last_lr()[0] > 0.5 * 0.2  # where the run ends: not annealed
    clean = verdict(diagnoses["by_script"]["onecycle_loader_steps.py"], "schedule-length")
    assert clean.status == "passed" and "12 steps is walked 12 steps" in clean.why


def test_a_stream_split_unevenly_by_islice(diagnoses):
    """Training stopped after 4 batches an epoch, far from the stream's end; the doctor's own
    pass over the same IterableDataset, after the script, counted each rank's epoch: islice's
    split of 67 batches, as torch's ranks would get it."""
    diagnosis = diagnoses["by_script"]["stream_islice_uneven.py"]
    f = finding(diagnosis, "uneven-inputs")
    split = {r: len(list(itertools.islice(range(67), r, None, 2))) for r in range(2)}
    assert f.evidence["batches_per_rank"] == f.evidence["items_per_rank"] == split
    assert split == {0: 34, 1: 33} and diagnosis.steps_run == 8
    clean = verdict(diagnoses["by_script"]["stream_islice_even.py"], "uneven-inputs")
    assert clean.status == "passed" and "33 batches on each rank" in clean.why


def test_a_shards_loss_divided_by_the_whole_dataset(diagnoses):
    """Rank 0 prints its loss sum over its 32 samples divided by all 64: half its own mean
    (the losses are the run's, one per batch of its whole epoch)."""
    f = finding(diagnoses["by_script"]["epoch_loss_dataset_len.py"], "mean-over-global-count")
    e = f.evidence
    shard = len(DistributedSampler(range(64), num_replicas=2, rank=0))
    assert e["rank_samples"] == shard == 32 and e["dataset_len"] == 64 and e["batches"] == 4
    assert e["value"] == pytest.approx(e["loss_sum"] / 64)
    assert e["rank_mean"] == pytest.approx(e["loss_sum"] / 32) == pytest.approx(2 * e["value"])
    assert f"{e['value']:.4f}" in e["printed"] and f"{e['rank_mean']:.4f}" not in e["printed"]
    source = (CORPUS / "epoch_loss_dataset_len.py").read_text().splitlines()
    assert "print(" in source[f.line - 1]
    clean = verdict(diagnoses["by_script"]["epoch_loss_reduced.py"], "mean-over-global-count")
    assert clean.status == "passed"


@pytest.mark.parametrize("name", ["ref_clean.py", "ref_batchnorm.py", "plain_clean.py",
                                  "hf_loop.py"])
def test_the_reference_run_agrees_with_a_clean_script(diagnoses, name):
    verdict = next(v for v in diagnoses["by_script"][name].checks
                   if v.id == "reference-differs")
    assert verdict.status == "passed", verdict.why
    assert verdict.why.startswith("2 ranks and one process on the same "), verdict.why
    assert " agree at every one of " in verdict.why


@pytest.mark.parametrize("name", sorted(REFERENCE_SAYS))
def test_the_reference_run_names_the_step_and_the_ratio(diagnoses, name):
    f = finding(diagnoses["by_script"][name], "reference-differs")
    for words in REFERENCE_SAYS[name]:
        assert words in f.message, (words, f.message)


def test_epochs_past_the_cap_run_one_batch_each(diagnoses):
    """Two epochs of 4 batches (8 steps), then each of the four epochs left gets one batch: the
    script's `last_loss.cpu()` after each epoch's loop needs one (an epoch with none leaves
    the int 0 there, as torch shows below). Those batches' steps are not counted; with
    `--steps 16` four epochs train before the cut."""
    diagnosis = diagnoses["by_script"]["epoch_last_loss.py"]
    assert diagnosis.outcome == "finished" and diagnosis.crash is None
    assert diagnosis.steps_run == 8
    said = diagnosis.output["rank0"]
    assert all(f"epoch {e}: last loss" in said for e in range(6))
    last_loss = 0
    for _ in DataLoader(range(0)):
        last_loss = torch.zeros(())
    with pytest.raises(AttributeError, match="'int' object has no attribute 'cpu'"):
        last_loss.cpu()
    longer = diagnoses["by_script"]["epoch_last_loss.py#steps16"]
    assert longer.outcome == "finished" and longer.steps_run == 16


def test_a_folder_the_script_made_is_listed_with_its_writes(diagnoses):
    """`weights/` exists only in the scratch folder: the script's own asserts show that
    `os.listdir`, `os.scandir`, `os.walk`, `Path.iterdir`, `Path.glob` and `rglob` and
    `glob.glob` all see what it wrote there, the checkpoint it removed gone."""
    diagnosis = diagnoses["by_script"]["weights_folder.py"]
    assert diagnosis.outcome == "finished" and diagnosis.crash is None
    assert "resumed from weights/epoch-2.pt:" in diagnosis.output["rank0"]
    assert [os.path.basename(p) for p in diagnosis.writes[0]] == [
        "epoch-0.pt", "epoch-1.pt", "epoch-2.pt"]


def test_a_gather_nccl_accepts_runs_as_nccl_would(diagnoses):
    """The loss (0-dim) all-gathered into `torch.zeros(1)` buffers: NCCL counts elements and
    accepts it; gloo compares shapes and refuses it (shown here on a real gloo group), so the
    mapped gather reshapes the input, and the report says so."""
    diagnosis = diagnoses["by_script"]["gather_scalar_nccl.py"]
    assert diagnosis.outcome == "finished" and diagnosis.steps_run == 4
    assert "step 3: losses" in diagnosis.output["rank0"]
    calls = {c["what"] for c in diagnosis.mapped["calls"]}
    assert "all_gather: input reshaped to its outputs' shape (NCCL counts elements)" in calls
    code = ("import torch, torch.distributed as d\n"
            "d.init_process_group('gloo', store=d.HashStore(), rank=0, world_size=1)\n"
            "try:\n    d.all_gather([torch.zeros(1)], torch.tensor(1.0))\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert "invalid tensor size at index 0 (expected (), got (1))" in out.stdout


def test_the_cuda_mark_follows_the_data(diagnoses):
    """Backend and device picked by `torch.cuda.is_available()` (True for the script here):
    the model's predictions, their `zeros_like` buffers and the labels moved with
    `.to(device)` are on "cuda" for NCCL's rules. The twin's counts, made by `torch.tensor` on
    the CPU, are found, at that line only."""
    clean = diagnoses["by_script"]["hf_device_gather.py"]
    assert (clean.backend_requested, clean.backend_used) == ("nccl", "gloo")
    assert verdict(clean, "cpu-tensor-nccl").status == "passed"
    assert "epoch 1: accuracy" in clean.output["rank0"]
    twin = diagnoses["by_script"]["hf_device_gather_cpu_count.py"]
    source = (CORPUS / "hf_device_gather_cpu_count.py").read_text().splitlines()
    assert [source[f.line - 1].strip() for f in twin.findings] == ["dist.all_reduce(totals)"]


def test_a_device_named_by_its_index_alone(diagnoses):
    """`torch.device(torch.cuda.current_device())`: on a CPU build an index alone names an
    accelerator there is none of (shown here); mapped, it is `cuda:<index>`, as on a machine
    with GPUs, and the clean script runs to its end."""
    diagnosis = diagnoses["by_script"]["device_from_index.py"]
    assert diagnosis.outcome == "finished" and diagnosis.crash is None
    assert diagnosis.steps_run == 8 and "epoch 1: loss" in diagnosis.output["rank0"]
    calls = {c["what"] for c in diagnosis.mapped["calls"]}
    assert "torch.device(index) -> torch.device('cuda', index)" in calls
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="Cannot access accelerator device"):
            torch.device(0)


def test_every_rank_on_gpu_0_without_set_device(diagnoses):
    """`.to("cuda")` with `torch.cuda.set_device` never called: each process's current device
    is 0 (torch.cuda.current_device() of a fresh process), so the two ranks' GPUs are one.
    The twin that sets each rank's device first uses cuda:0 and cuda:1."""
    f = finding(diagnoses["by_script"]["cuda_no_set_device.py"], "ranks-share-gpu")
    assert f.evidence["indices"] == {0: [0], 1: [0]} and not f.evidence["set_device"]
    source = (CORPUS / "cuda_no_set_device.py").read_text().splitlines()
    assert '.to("cuda")' in source[f.line - 1]
    clean = verdict(diagnoses["by_script"]["device_from_index.py"], "ranks-share-gpu")
    assert clean.status == "passed" and "rank 0: cuda:0; rank 1: cuda:1" in clean.why


def test_a_custom_sampler_judged_by_its_orders(diagnoses):
    """The script calls set_epoch every epoch; its sampler's __iter__ never reads the epoch.
    The orders the run saw are torch's randperm of the seed alone, twice (shown here); the
    twin's follow the epoch and pass."""
    f = finding(diagnoses["by_script"]["custom_sampler_epoch.py"], "sampler-set-epoch")
    first, second = f.evidence["first_indices"]
    g = torch.Generator().manual_seed(42)
    shard = torch.randperm(64, generator=g).tolist()[0::2]
    assert first == second == shard and f.evidence["epochs"] == [0, 1]
    source = (CORPUS / "custom_sampler_epoch.py").read_text().splitlines()
    assert source[f.line - 1].strip() == "def __iter__(self):"
    g = torch.Generator().manual_seed(42 + 1)
    assert torch.randperm(64, generator=g).tolist()[0::2] != shard  # what epoch 1 would give
    clean = verdict(diagnoses["by_script"]["custom_sampler_epoch_clean.py"], "sampler-set-epoch")
    assert clean.status == "passed" and "ShardSampler" in clean.why


def test_a_scheduler_stepped_on_rank_0_only(diagnoses):
    """Rank 0's StepLR (gamma 0.7) steps after step 1; rank 1's never does: the finding says
    the learning rates (0.2 x 0.7 against 0.2), as torch's scheduler gives them here."""
    f = finding(diagnoses["by_script"]["scheduler_rank0.py"], "replicas-diverge")
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    optimizer.step()
    scheduler.step()
    lr = scheduler.get_last_lr()[0]
    assert f"learning rates differ between ranks from step 2 ({lr:.4g} on rank 0 against " \
        "0.2 on rank 1)" in f.message
    assert f.evidence["step"] == 2 and "scheduler.step()  # on every rank" in f.fix


def test_a_collective_of_the_module_run_alone_gets_its_own_fix(diagnoses):
    """Rank 0 runs `model.module(probe)` in training mode: its SyncBatchNorm synchronises the
    batch statistics there (torch's own check below: in eval() it does not), while rank 1 is
    in the barrier after it. The fix puts the module in eval() first."""
    diagnosis = diagnoses["by_script"]["eval_rank0_sync_batchnorm.py"]
    f = finding(diagnosis, "collective-on-some-ranks")
    source = (CORPUS / "eval_rank0_sync_batchnorm.py").read_text().splitlines()
    assert "model.module(probe)" in source[f.line - 1]
    assert diagnosis.outcome == "hang" or diagnosis.crash_explained  # or gloo's mismatch error
    calls = f.evidence["calls"]  # rank 0's evidence may be its ledger alone (a silent rank)
    assert calls[0]["by"] == "SyncBatchNorm's all-reduce of its batch statistics"
    assert calls[1]["op"] == "barrier" and f.fix.startswith("model.eval()")
    batchnorm = (pathlib.Path(torch.__file__).parent / "nn/modules/batchnorm.py").read_text()
    assert "bn_training\n            and self.training\n" in batchnorm  # no sync in eval()


def test_an_unseeded_split_inside_a_dataset_class(diagnoses):
    """random_split without a generator in the Dataset's __init__: each rank's process splits
    its own way (two unseeded splits of torch's differ, shown here), and the digests of the
    Subsets the class holds differ."""
    f = finding(diagnoses["by_script"]["split_inside_dataset.py"], "different-datasets")
    prints = f.evidence["fingerprints"]
    assert prints[0] != prints[1] and all(p.startswith("holds:") for p in prints.values())
    assert f.evidence["dataset_len"] == 80 and "SplitData holds" in f.message
    splits = [torch.utils.data.random_split(range(100), [0.8, 0.2])[0].indices for _ in "ab"]
    assert splits[0] != splits[1]


def test_a_file_read_while_another_rank_writes_it(diagnoses):
    """Every rank writes vocab.json and rank 0 reads it back with no collective in between:
    named at the read, whether or not this run's read met a half-written file (when it did,
    the JSONDecodeError is explained)."""
    diagnosis = diagnoses["by_script"]["vocab_every_rank.py"]
    f = finding(diagnosis, "read-while-written")
    assert (f.evidence["reader"], f.evidence["writer"]) == (0, 1)
    assert f.evidence["path"].endswith("vocab.json") and f.evidence["collectives_before"] == 0
    source = (CORPUS / "vocab_every_rank.py").read_text().splitlines()
    assert 'open("vocab.json")' in source[f.line - 1]
    assert diagnosis.crash is None or diagnosis.crash_explained
