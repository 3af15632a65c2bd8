"""The decode step-time model (step_model.py) against what it must reproduce before it ranks anything,
and its own consistency, from the committed profile and card specs (CPU, stdlib only)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tools.bench import step_model  # noqa: E402


def load():
    return json.load(open(step_model.SPECS)), json.load(open(step_model.PROFILE))


def test_the_seed_forks_own_single_stream_figure_within_25_percent():
    got, (low, high) = step_model.seed_check(*load())
    assert 0.75 * low <= got <= 1.25 * high, (got, low, high)


def test_one_kernel_latency_explains_every_tp_width_profiled_at_one_commit_at_batch_1():
    specs, profile = load()
    fits, latency = step_model.fit(profile, specs["assumptions"])
    by_commit = {}
    for f in fits:
        if f["batch"] == 1:
            by_commit.setdefault(f.get("commit"), []).append(f["latency_us"])
    assert all(0.5 < x < 20 for ones in by_commit.values() for x in ones), by_commit
    widths = [ones for ones in by_commit.values() if len(ones) >= 2]
    assert widths, "no commit profiled at two TP widths"
    for ones in widths:  # the widths of one code differ by bytes only
        assert max(ones) / min(ones) < 1.2, by_commit
    assert latency in [sum(ones) / len(ones) for ones in by_commit.values()]
    for f in fits:  # the bytes term is the smaller part at batch 1: the step is bound by kernel count
        if f["batch"] == 1:
            assert f["bytes_us"] < 0.3 * f["layer_us"], f


def test_more_ranks_read_fewer_bytes_and_a_bigger_batch_reads_more():
    assert step_model.layer_bytes(8, 1) < step_model.layer_bytes(4, 1) < step_model.layer_bytes(2, 1)
    assert step_model.layer_bytes(4, 1) < step_model.layer_bytes(4, 8) < step_model.layer_bytes(4, 64)


def test_the_table_has_every_sm8x_card_and_deployment():
    specs, profile = load()
    text = step_model.table(specs, profile)
    for card in (c for c in specs["cards"] if c["row"]):
        for tp, pp in step_model.DEPLOYMENTS:
            assert f"| {card['name']} | {tp} x {pp} |" in text, (card["name"], tp, pp)


def test_the_goals_kernel_bound_is_where_the_modelled_step_meets_the_goal():
    specs, profile = load()
    card = next(c for c in specs["cards"] if c["name"] == step_model.SEED["card"])
    _, latency = step_model.fit(profile, specs["assumptions"])
    for batch, want, got, now, most, ceiling in step_model.goal_bound(specs, profile):
        at_bound = step_model.step_ms(card, 8, 1, batch, profile, latency, specs["assumptions"], kernels=most)
        assert abs(batch * 1e3 / at_bound - want) < 1e-6 * want
        assert (got >= want) == (now <= most) and ceiling > got


def test_dspark_scales_the_plain_step_by_the_profiled_ratio_and_the_accepted_tokens():
    specs, profile = load()
    card = next(c for c in specs["cards"] if c["name"] == step_model.SEED["card"])
    _, latency = step_model.fit(profile, specs["assumptions"])
    plain = dict(profile["rows"][0])
    tp, batch = plain["tp"], plain["batch"]
    profile = dict(profile, dspark_rows=[dict(plain, step_gpu_us=2.5 * plain["step_gpu_us"])])
    step = step_model.step_ms(card, tp, 1, batch, profile, latency, specs["assumptions"])
    tok_s = [step_model.dspark_tok_s(card, tp, 1, batch, profile, latency, specs["assumptions"], a)
             for a in (0.0, 0.5, 1.0)]
    assert abs(tok_s[0] - batch * 1e3 / step / 2.5) < 1e-9 * tok_s[0]  # nothing accepted: one token a 2.5x step
    assert abs(tok_s[2] - 6 * tok_s[0]) < 1e-9 * tok_s[2]  # everything: six
    assert tok_s[0] < tok_s[1] < tok_s[2]
    assert step_model.dspark_tok_s(card, tp, 1, batch + 1, profile, latency, specs["assumptions"], 0.5) is None


def test_a_profiles_kernels_are_sorted_into_kinds_again_without_a_gpu(tmp_path, capsys):
    from tools.bench import decode_step_profile

    row = {"tp": 4, "heads": 16, "batch": 1, "query_tokens": 1, "layers": 5, "step_gpu_us": 30.0,
           "kinds_us": {"other": 30.0},
           "kernels": {"mhc_pre_kernel": [10.0, 2], "prenorm_gemm_kernel": [8.0, 2], "split_k_sum_kernel": [5.0, 1],
                       "void vllm::moe::dsv4HashTopkSoftplusSqrt<int>": [4.0, 1], "mystery": [3.0, 1]}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps([row]))
    assert decode_step_profile.main(["--table-from", str(path)]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("| 4 | 16 |"))
    assert "| 18 us (60%) |" in line and "| 5 us (17%) |" in line and "| 3 us (10%) |" in line, line


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
