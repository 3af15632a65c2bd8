"""The support table's "verified" comes only from recorded GPU end-to-end runs: gpu_serve.py's own
summary (job results, group mismatches), packed as tests/device/check.sh brings it back, recorded by
`./bazelw run //models:record_gpu_run`, read by the registry and printed, with the GPU, by the README."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import gpu_serve  # noqa: E402

from models import gpu_runs, readme, registry  # noqa: E402

H200 = "NVIDIA H200"
RECORD_BINARY = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None


def result(sm, case, passed, tokens=(1, 2, 3), reference=True):
    """A job record as gpu_serve.run_job writes it (the fields the summary reads); with a reference,
    each greedy record says how many tokens agreed with it."""
    greedy = {"tokens": list(tokens), **({"agree": len(tokens)} if reference else {})}
    return {"sm": sm, "case": case, "checkpoint": gpu_serve.BY_NAME[case].checkpoint, "emulated": True,
            "passed": passed, "failures": [] if passed else ["a failure"], "greedy": [greedy]}


def packed_run(tmp_path, results):
    """gpu_serve's --out folder and its archive, as a finished run leaves them."""
    out = tmp_path / "out"
    out.mkdir()
    summary = gpu_serve.summarize(results, H200, 90, gpu_serve.same_text(results))
    (out / "summary.json").write_text(json.dumps(summary))
    gpu_serve.archive(out, str(tmp_path / "gpu_serve.tgz"))
    return tmp_path / "gpu_serve.tgz"


def cell(runs, model, fmt, sm):
    family = next(f for f in registry.product_entries(runs) if f["model"] == model)
    return family["formats"][fmt]["sm"][sm]


def test_a_checkpoint_served_with_every_job_passed_is_verified_on_that_sm_only(tmp_path):
    results = [result("sm86", "qwen3_5_bf16_eager", True), result("sm86", "qwen3_5_bf16", True),
               result("sm86", "qwen3_5_awq", False)]
    runs = gpu_runs.record(gpu_runs.summary_of(packed_run(tmp_path, results)), "abc1234", "2026-12-06", [])
    bf16 = cell(runs, "Qwen3.8-27B", "BF16", "sm86")
    assert bf16["status"] == "verified" and bf16["gpu"] == "H200, emulating sm86"
    assert "qwen3_5_bf16, qwen3_5_bf16_eager" in bf16["why"] and "abc1234" in bf16["why"]
    assert cell(runs, "Qwen3.8-27B", "BF16", "sm80")["status"] == "expected"  # not run there
    awq = cell(runs, "Qwen3.8-27B", "AWQ W4A16", "sm86")
    assert awq["status"] == "expected" and "failed: qwen3_5_awq" in awq["why"]  # its job failed, and says so
    row = next(line for line in readme.support_table(registry.product_entries(runs)) if "| BF16 |" in line
               and "Qwen3.8-27B" in line)
    assert "| expected | verified (H200, emulating sm86) | expected |" in row


def test_a_format_with_two_layouts_is_verified_only_when_both_were_served_and_passed(tmp_path):
    # GLM-5.3 BF16: the flat text checkpoint and the released layout with MTP (tiny_also).
    def runs_of(*results):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        return gpu_runs.record(gpu_runs.summary_of(packed_run(folder, list(results))), "abc1234", "2026-12-07", [])

    only_flat = runs_of(result("sm86", "glm5_next_bf16", True))
    assert cell(only_flat, "GLM-5.3-Flash", "BF16", "sm86")["status"] == "expected"
    mtp_failed = runs_of(result("sm86", "glm5_next_bf16", True), result("sm86", "glm5_next_mtp", False))
    failed = cell(mtp_failed, "GLM-5.3-Flash", "BF16", "sm86")
    assert failed["status"] == "expected" and "failed: glm5_next_mtp" in failed["why"]
    both = runs_of(result("sm86", "glm5_next_bf16", True), result("sm86", "glm5_next_mtp", True))
    verified = cell(both, "GLM-5.3-Flash", "BF16", "sm86")
    assert verified["status"] == "verified" and "glm5_next_bf16, glm5_next_mtp" in verified["why"]


def test_a_verified_cell_says_what_its_text_was_compared_with(tmp_path):
    results = [result("sm89", "qwen3_5_awq", True), result("sm89", "qwen4_exp_awq_mtp", True, reference=False)]
    runs = gpu_runs.record(gpu_runs.summary_of(packed_run(tmp_path, results)), "abc1234", "2026-12-06", [])
    assert "against transformers float32" in cell(runs, "Qwen3.8-27B", "AWQ W4A16", "sm89")["why"]
    assert "no float32 reference" in cell(runs, "Qwen3.8-Flash-Next", "AWQ W4A16", "sm89")["why"]


def test_cases_of_a_group_that_disagree_verify_nothing(tmp_path):
    results = [result("sm86", "qwen3_5_bf16_eager", True, tokens=(1, 2, 3)),
               result("sm86", "qwen3_5_bf16", True, tokens=(1, 2, 4))]
    summary = gpu_runs.summary_of(packed_run(tmp_path, results))
    assert summary["passed"] == 0 and summary["same_text_failures"]
    runs = gpu_runs.record(summary, "abc1234", "2026-12-06", [])
    assert cell(runs, "Qwen3.8-27B", "BF16", "sm86")["status"] == "expected"


def test_modes_that_part_at_a_near_tie_of_their_own_still_agree():
    def greedy(tokens, gaps):
        return {"greedy": [{"tokens": list(tokens), "gaps": list(gaps)}]}

    eager = dict(result("sm86", "qwen3_5_bf16_eager", True), **greedy((1, 2, 3, 9), (2.0, 3.0, 0.2, 1.5)))
    graphs = dict(result("sm86", "qwen3_5_bf16", True), **greedy((1, 2, 4, 7), (2.0, 3.0, 0.3, 2.5)))
    assert gpu_serve.same_text([eager, graphs]) == []  # part at token 2, a near tie in both
    clear = dict(graphs, **greedy((1, 2, 4, 7), (2.0, 3.0, 1.4, 2.5)))
    assert "token 2 is 4 and 3" in gpu_serve.same_text([eager, clear])[0]  # clear in one mode: a real difference
    # A prompt whose bf16 run drifts 0.2 from float32 (a random model's near-tied routing): gaps under
    # NEAR_TIE + 4 x 0.2 are still near ties.
    drifting = [dict(r, greedy=[dict(r["greedy"][0], bf16_drift=0.2)]) for r in (eager, clear)]
    assert gpu_serve.same_text(drifting) == []


def test_echoed_log_probabilities_across_modes_allow_twice_the_prompts_bf16_drift():
    def echo(case, shift, drift):
        return dict(result("sm86", case, True), echo={"logprobs": [-1.0, -2.0 + shift], "bf16_drift": drift})

    base = echo("glm5_next_bf16", 0.0, 0.0)
    assert "differ" in gpu_serve.same_text([base, echo("glm5_next_bf16_eager", 0.9, 0.0)])[0]
    assert gpu_serve.same_text([base, echo("glm5_next_bf16_eager", 0.9, 0.3)]) == []


def test_echoed_log_probabilities_are_held_to_the_references_own_within_twice_its_prompt_drift():
    longest = {"prompt_logprobs": [-1.0, -2.0, -3.0], "prompt_bf16_drift": 0.25}  # tolerance 0.5 + 0.5
    assert gpu_serve.echo_against_reference([-1.2, -2.9, -3.0], longest) == (0.9, 0.3667, [])
    worst, _, failures = gpu_serve.echo_against_reference([-1.2, -2.0, -4.2], longest)
    assert worst == 1.2 and "position 3" in failures[0] and "1 positions over" in failures[0]
    # Every position a little off, none past the largest drift: the mean catches it.
    longest.update(prompt_bf16_drift=2.0, prompt_bf16_mean_drift=0.1)  # mean tolerance 0.05 + 0.2
    assert gpu_serve.echo_against_reference([-1.2, -2.2, -3.2], longest)[2] == []
    _, mean, failures = gpu_serve.echo_against_reference([-2.0, -3.0, -4.0], longest)
    assert mean == 1.0 and failures == ["echoed prompt log-probabilities are 1.000 from the reference's on average "
                                        "(tolerance 0.250)"]
    # With the reference's own scores checked, the modes are not compared with each other.
    held = dict(result("sm86", "glm5_next_bf16", True), echo={"logprobs": [-1.0], "bf16_drift": 0.0, "max_diff": 0.1})
    other = dict(result("sm86", "glm5_next_bf16_eager", True),
                 echo={"logprobs": [-5.0], "bf16_drift": 0.0, "max_diff": 0.1})
    assert gpu_serve.same_text([held, other]) == []


def test_a_jobs_record_keeps_the_error_lines_of_its_server_log():
    log = "\n".join([
        "(EngineCore pid=2) ERROR 12-06 19:01:03 [core.py:9] EngineCore failed to start.",
        "Traceback (most recent call last):",
        "\t.b8 114",  # a kernel's PTX dump
        "RuntimeError: PassManager::run failed",
        "(APIServer pid=1) INFO 12-06 19:01:04 [launcher.py:279] shutting down",
        "(APIServer pid=1) WARNING 12-06 19:01:05 [system_utils.py:255] ulimit too low: this can cause `OSError: [Errno 24] Too many open files`",
    ])
    picked = gpu_serve.error_lines(log)
    assert "RuntimeError: PassManager::run failed" in picked and "Traceback (most recent call last):" in picked
    assert not any("WARNING" in line for line in picked), picked


def test_the_newest_run_of_a_checkpoint_on_an_sm_decides(tmp_path):
    runs = []
    for day, passed in (("2026-12-06", True), ("2026-12-07", False)):
        (tmp_path / day).mkdir()
        summary = gpu_runs.summary_of(packed_run(tmp_path / day, [result("sm86", "qwen3_5_awq", passed)]))
        runs = gpu_runs.record(summary, "abc1234", day, runs)
        word = cell(runs, "Qwen3.8-27B", "AWQ W4A16", "sm86")["status"]
        assert word == ("verified" if passed else "expected"), day


def test_a_pass_from_before_a_fix_the_format_names_is_not_verified_until_served_again(tmp_path):
    runs = []
    for commit in ("efcbd1a", "0a1b2c3"):  # GLM-5.3 AWQ's stale_through commit, then a later bundle
        (tmp_path / commit).mkdir()
        summary = gpu_runs.summary_of(packed_run(tmp_path / commit, [result("sm89", "glm5_next_awq", True)]))
        runs = gpu_runs.record(summary, commit, "2026-12-07", runs)
        got = cell(runs, "GLM-5.3-Flash", "AWQ W4A16", "sm89")
        if commit == "efcbd1a":
            assert got["status"] == "expected" and "before patch 0005" in got["why"], got
            assert "not yet served again" in got["why"] and "efcbd1a" in got["why"]
        else:
            assert got["status"] == "verified" and "0a1b2c3" in got["why"], got


def test_a_job_the_runs_time_limit_cut_short_neither_verifies_nor_takes_back(tmp_path):
    (tmp_path / "a").mkdir()
    runs = gpu_runs.record(gpu_runs.summary_of(packed_run(tmp_path / "a", [result("sm86", "qwen3_5_awq", True)])),
                           "abc1234", "2026-12-06", [])
    cut = dict(result("sm86", "qwen3_5_awq", False), cut_short=True)
    finished = result("sm80", "qwen3_5_awq", False)
    (tmp_path / "b").mkdir()
    runs = gpu_runs.record(gpu_runs.summary_of(packed_run(tmp_path / "b", [cut, finished])), "def5678", "2026-12-07",
                           runs)
    assert runs[-1]["cut_short"] == ["sm86 qwen3_5_awq"]
    assert cell(runs, "Qwen3.8-27B", "AWQ W4A16", "sm86")["status"] == "verified"  # the earlier run still decides
    assert "failed: qwen3_5_awq" in cell(runs, "Qwen3.8-27B", "AWQ W4A16", "sm80")["why"]  # a finished job counts
    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match="cut every job short"):
        gpu_runs.record(gpu_runs.summary_of(packed_run(tmp_path / "c", [cut])), "def5678", "2026-12-07", runs)


def test_a_server_the_deadline_stopped_waiting_for_is_cut_short_not_failed(tmp_path):
    case = gpu_serve.BY_NAME["qwen3_5_awq"]
    server = gpu_serve.Server(case, "sm86", str(tmp_path), tmp_path / "job", False, {}, deadline=0.0)
    with pytest.raises(gpu_serve.RunTimeLimit):
        server.left(case.start_timeout)


def test_an_archive_without_a_summary_is_refused_by_name(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sm86-qwen3_5_awq.json").write_text("{}")
    gpu_serve.archive(out, str(tmp_path / "cut.tgz"))
    with pytest.raises(ValueError, match="holds no summary.json"):
        gpu_runs.summary_of(tmp_path / "cut.tgz")


def test_the_bazel_target_records_a_run_into_the_checkouts_file(tmp_path):
    if RECORD_BINARY is None:
        pytest.skip("run through Bazel (the binary is its argument)")
    checkout = tmp_path / "checkout"
    (checkout / "models").mkdir(parents=True)
    (checkout / "models" / "gpu_runs.json").write_text('{"runs": []}\n')
    archive = packed_run(tmp_path, [result("sm89", "glm5_next_awq", True)])
    done = subprocess.run([str(RECORD_BINARY), str(archive), "--commit", "abc1234", "--date", "2026-12-06"],
                          env=dict(os.environ, BUILD_WORKSPACE_DIRECTORY=str(checkout)),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1/1 jobs passed on NVIDIA H200" in done.stdout
    runs = gpu_runs.load(checkout / "models" / "gpu_runs.json")
    assert runs[0]["jobs"] == [{"sm": "sm89", "case": "glm5_next_awq", "checkpoint": "tiny_glm5_next_awq",
                                "passed": True, "reference": True}]
    assert cell(runs, "GLM-5.3-Flash", "AWQ W4A16", "sm89")["status"] == "verified"


def test_the_committed_record_names_only_product_checkpoints_and_rows():
    tiny = {name for family in registry.product_entries() for spec in family["formats"].values()
            for name in registry.tiny_checkpoints(spec)}
    for run in gpu_runs.load():
        assert {"date", "commit", "gpu", "emulated", "jobs"} <= set(run)
        for job in run["jobs"]:
            assert job["checkpoint"] in tiny and job["sm"] in registry.SMS, job


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))


def test_single_jobs_add_to_the_sm_by_case_product_and_bad_names_are_refused():
    def error(message):
        raise ValueError(message)

    pairs = gpu_serve.requested_jobs(["sm80"], ["glm5_next_awq"], ["sm89:glm5_next_awq", "sm80:glm5_next_awq"], error)
    assert [(sm, case.name) for sm, case in pairs] == [("sm80", "glm5_next_awq"), ("sm89", "glm5_next_awq")]
    assert len(gpu_serve.requested_jobs([], None, ["sm86:qwen3_5_awq"], error)) == 1
    with pytest.raises(ValueError, match="unknown case glm5_nxt"):
        gpu_serve.requested_jobs([], None, ["sm86:glm5_nxt"], error)
    with pytest.raises(ValueError, match="SM:CASE"):
        gpu_serve.requested_jobs([], None, ["glm5_next_awq"], error)
    with pytest.raises(ValueError, match="--sm sm86"):
        gpu_serve.requested_jobs([], None, [], error)
