"""The GPU end-to-end check: `vllm serve` of each tiny checkpoint on a GPU, as an sm8x card runs it.

  gpu_serve.py --sm sm86 [--sm sm80 ...] [--case NAME ...] [--job SM:CASE ...] --models DIR --references DIR --out DIR
               [--parallel N] [--plugin-wheel WHL --kernels-dir DIR]

On the lent GPU the bundle provides vLLM, the plugin and the kernels (tests/device/README.md); on
a GPU runner under Bazel (gpu_serve_test_smXX) --plugin-wheel and --kernels-dir point the servers
at the built ones.

For each SM row and case (gpu_serve_cases.py) it starts the real `vllm serve` with the case's
flags, on a GPU of that row or, on a newer GPU, emulating it (VLLM_BACKPORT_TARGET: vLLM's platform
answers the row's capability in every process, vllm_backport/emulation.py). Several servers share
the GPU at once (--parallel); on an emulated run, FlashAttention 2's kernels the checkpoints need are
first compiled for the real GPU once (fa2_warmup.py). Against each server:
- greedy tokens of every reference prompt (references/<checkpoint>.json: transformers float32 of
  the same weights) decoded to the end; the first mismatch must sit where the reference's top-two
  logit gap is below NEAR_TIE, and the test names that position and gap (NEAR_TIE and LOGPROB_TOL
  widen by twice each case's bf16_drift: how far transformers' own bf16 run lands from float32);
- the same prompts teacher-forced (vLLM's prompt_logprobs over prompt + reference tokens): at
  every position whose reference gap is at least NEAR_TIE, vLLM's top token is the reference's,
  and at every position vLLM's log-probability of the reference token is within the tolerance of
  the reference's (the largest difference is recorded);
- where the case asks (echo): the longest prompt's echoed tokens are the ones sent and each has a
  finite log-probability within LOGPROB_TOL plus twice the prompt's largest bf16 drift of the
  reference's own, and their mean difference within MEAN_TOL plus twice the mean drift (older
  references without them: the log-probabilities agree across the group's modes);
- 16 concurrent chat requests are all answered;
- time to first token and decode tokens/s of one request (a tiny model: these time the engine's
  fixed costs, not the kernels);
- the route kernels each process ran (VLLM_BACKPORT_ROUTE_COUNTS) include the case's list;
- the backends vLLM logged it chose, and the shared libraries every server process had mapped
  (/proc/PID/maps), for the image-size measurement;
- on several GPUs: speculative decoding's acceptance within ACCEPTANCE_MARGIN of the one-GPU case
  of its group, and a soak of about 2,000 graph-replayed decode steps at varying batch sizes.
Then cases of one group must have produced the same greedy text. One JSON per job and summary.json
go to --out; the exit status is 0 only if every job passed.
"""

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import math
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fa2_warmup  # noqa: E402
from gpu_serve_cases import ACCEPTANCE_MARGIN, BY_NAME, CASES, COMMON  # noqa: E402

# Largest reference top-two logit gap at which bf16 activations and the fp8 KV cache may flip the
# greedy token (the cases run bf16 on checkpoints whose logits span ~10).
NEAR_TIE = 1.0
# Largest difference allowed between vLLM's and the reference's log-probability of a token.
LOGPROB_TOL = 0.5
# The mean of a long prompt's echoed log-probabilities may sit this far from float32 beyond twice
# transformers' own bf16 mean drift (0.04-0.27 on the tiny checkpoints' long prompts).
MEAN_TOL = 0.05


def tolerances(ref):
    """(near-tie gap, log-probability tolerance) for one reference case: NEAR_TIE and LOGPROB_TOL
    widened by twice the case's bf16_drift (how far transformers' own bf16 run of the model lands
    from its float32 one, models/reference.py). Twice: that drift is one bf16 implementation's
    distance, and vLLM's bf16 kernels (other accumulation orders, chunked prefill, graphs) are
    another draw of it; on tiny GLM-5.3's long prompt vLLM landed 0.95-1.45x transformers' drift
    (H100, 2026-12-07), while a wrong kernel lands many times it (the PLE hashing: over 10x)."""
    drift = ref.get("bf16_drift", 0.0)
    return NEAR_TIE + 2 * drift, LOGPROB_TOL + 2 * drift
CONCURRENT = 16
DECODE_TOKENS = 128
BACKEND_LINE = re.compile(r"(Using|Selected|selected|chose|choosing) .*(backend|Backend|kernel|Kernel)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_script():
    """The `vllm` console script: on PATH (the bundle's), else next to this interpreter."""
    return shutil.which("vllm") or str(pathlib.Path(sys.executable).parent / "vllm")


def reference_file(folder, checkpoint):
    for name in (f"{checkpoint}.json", f"{checkpoint}_reference.json"):
        if (pathlib.Path(folder) / name).exists():
            return pathlib.Path(folder) / name
    raise FileNotFoundError(f"no reference JSON for {checkpoint} in {folder}")


def gpu_capability():
    import torch

    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor, torch.cuda.get_device_name()


def jit_cache_env(folder):
    """The driver JIT cache every server and the FlashAttention 2 warm-up share."""
    return {"CUDA_CACHE_PATH": str(pathlib.Path(folder) / "cuda-jit-cache"), "CUDA_CACHE_MAXSIZE": str(4 << 30)}


def warm_flash_attention(jobs, args):
    """On an emulated run, compiles FlashAttention 2's modules the checkpoints need once, all at
    once, before any server starts (fa2_warmup.py says why); a failed call is reported, not fatal."""
    dims = fa2_warmup.head_dims(sorted({pathlib.Path(args.models) / case.checkpoint for _, case, _ in jobs}))
    calls = fa2_warmup.variants(dims)
    if not calls:
        return
    env = dict(os.environ, **jit_cache_env(args.workdir or tempfile.gettempdir()))
    script = str(pathlib.Path(__file__).resolve().with_name("fa2_warmup.py"))
    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, script, str(d), str(int(c)), str(int(s))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for d, c, s in calls]
    failed = []
    for call, proc in zip(calls, procs):
        try:
            output, _ = proc.communicate(timeout=max(1.0, min(300.0, args.deadline - time.monotonic() - 120)))
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{call}: {output.strip().splitlines()[-1:] or proc.returncode}")
    print(f"gpu_serve: FlashAttention 2 warm-up, head sizes {dims}: {len(calls)} calls in parallel, "
          f"{time.monotonic() - began:.0f} s" + (f"; failed: {'; '.join(failed)}" if failed else ""), flush=True)


class RunTimeLimit(TimeoutError):
    """The run's --time-limit, not the job, ended a wait: the job is recorded as cut short, which
    says nothing about the model (models/gpu_runs.py leaves such jobs out)."""


class Server:
    """One `vllm serve` in its own process group, logging to a file; every wait ends by deadline
    (a monotonic time), so a run always ends within its --time-limit."""

    def __init__(self, case, sm, models, workdir, emulate, extra_env, deadline):
        self.case, self.port, self.deadline = case, free_port(), deadline
        self.workdir = pathlib.Path(workdir)
        self.counts = self.workdir / "route-counts"
        self.log_path = self.workdir / "server.log"
        # PYTHONFAULTHANDLER: a server that hangs is sent SIGABRT and prints every thread's stack.
        env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONFAULTHANDLER="1",
                   VLLM_BACKPORT_ROUTE_COUNTS=str(self.counts), VLLM_CACHE_ROOT=str(self.workdir / "vllm-cache"),
                   TRITON_CACHE_DIR=str(self.workdir / "triton"),
                   # One driver JIT cache for every server: kernels shipped as PTX only (FlashAttention 2
                   # on a newer GPU) are compiled once per machine, not once per process.
                   **jit_cache_env(self.workdir.parent))
        if emulate:
            env["VLLM_BACKPORT_TARGET"] = sm
        env.update(extra_env)
        env.update(dict(case.env))
        self.model = str(pathlib.Path(models) / case.checkpoint)
        self.command = [vllm_script(), "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port),
                        "--served-model-name", "m", *case.command_args, *COMMON]
        self.env = env

    def start(self):
        self.log = open(self.log_path, "w")
        began = time.monotonic()
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        limit = self.left(self.case.start_timeout) - 20  # time to dump stacks and stop
        capped = limit < self.case.start_timeout - 20

        while time.monotonic() - began < limit:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.request("GET", "/health", timeout=5)[0] == 200:
                    return time.monotonic() - began
            time.sleep(1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGABRT)  # the stacks of the hang go to the log
        time.sleep(5)
        why = "the run's --time-limit was reached: " if capped else ""
        raise (RunTimeLimit if capped else TimeoutError)(f"{why}vllm serve not ready after {limit:.0f} s:\n{self.tail()}")

    def left(self, most):
        """Seconds a wait may take: at most `most`, never past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise RunTimeLimit("the run's --time-limit was reached")
        return min(most, left)

    def request(self, method, path, body=None, timeout=240):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.left(timeout))
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read().decode()
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, raw
        finally:
            conn.close()

    def post(self, path, body, timeout=240):
        status, answer = self.request("POST", path, body, timeout)
        if status != 200:
            raise AssertionError(f"{path} answered {status}: {str(answer)[:2000]}")
        return answer

    def mapped_libraries(self):
        """Shared libraries mapped by every process of the server's group."""
        found = set()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError):
                if os.getpgid(int(pid)) != self.proc.pid:
                    continue
                for line in open(f"/proc/{pid}/maps"):
                    path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                    if ".so" in path:
                        found.add(path)
        return sorted(found)

    def stop(self):
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.log.close()

    def tail(self, lines=80):
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def greedy_check(server, cases, new_tokens):
    """Greedy tokens against the reference (where the cases have one), up to the first allowed
    near tie; returns per-prompt records and the list of failures."""
    records, failures = [], []
    for index, ref in enumerate(cases):
        answer = server.post("/v1/completions", {"model": "m", "prompt": ref["prompt"], "max_tokens": new_tokens,
                                                 "temperature": 0, "ignore_eos": True, "return_token_ids": True})
        got = answer["choices"][0]["token_ids"]
        gaps = own_gaps(server, ref["prompt"], got)
        if "tokens" not in ref:
            records.append({"prompt_tokens": len(ref["prompt"]), "tokens": got, "gaps": gaps})
            continue
        near_tie, _ = tolerances(ref)
        first = next((i for i, (a, b) in enumerate(zip(got, ref["tokens"])) if a != b), None)
        record = {"prompt_tokens": len(ref["prompt"]), "tokens": got, "gaps": gaps,
                  "agree": first if first is not None else len(got), "bf16_drift": ref.get("bf16_drift", 0.0)}
        if first is not None:
            record["first_mismatch"] = {"position": first, "reference_gap": ref["gaps"][first],
                                        "got": got[first], "want": ref["tokens"][first]}
            if ref["gaps"][first] >= near_tie:
                failures.append(f"prompt {index} ({len(ref['prompt'])} tokens): token {first} is {got[first]}, the "
                                f"reference's {ref['tokens'][first]} wins there by {ref['gaps'][first]:.3f} >= "
                                f"{near_tie:.3f}")
        records.append(record)
    return records, failures


def own_gaps(server, prompt, tokens):
    """The server's own top-two log-probability gap at each of its greedy tokens (prompt_logprobs
    over prompt + tokens): where two serving modes of one model part, both must be near a tie."""
    answer = server.post("/v1/completions", {"model": "m", "prompt": prompt + tokens, "max_tokens": 1,
                                             "temperature": 0, "prompt_logprobs": 2})
    gaps = []
    for entry in answer["choices"][0]["prompt_logprobs"][len(prompt):]:
        ranked = {v["rank"]: v["logprob"] for v in (entry or {}).values()}
        gaps.append(round(ranked[1] - ranked[2], 4) if 1 in ranked and 2 in ranked else None)
    return gaps


def teacher_forced_check(server, cases):
    """vLLM's prompt_logprobs over each prompt + reference continuation: its top token where the
    reference is clear, and its log-probability of the reference token everywhere. Returns
    (positions compared by token, largest log-probability difference, failures)."""
    compared, worst, failures = 0, 0.0, []
    for index, ref in enumerate(cases):
        near_tie, tolerance = tolerances(ref)
        ids = ref["prompt"] + ref["tokens"]
        answer = server.post("/v1/completions", {"model": "m", "prompt": ids, "max_tokens": 1, "temperature": 0,
                                                 "prompt_logprobs": 1})
        logprobs = answer["choices"][0]["prompt_logprobs"]
        for step, (token, gap, want) in enumerate(zip(ref["tokens"], ref["gaps"], ref["logprobs"])):
            entry = (logprobs[len(ref["prompt"]) + step] or {}).get(str(token), {})
            diff = abs(entry.get("logprob", float("-inf")) - want)
            worst = max(worst, diff)
            if diff > tolerance:
                failures.append(f"prompt {index}: step {step}: log-probability of the reference token {token} is "
                                f"{entry.get('logprob')}, the reference's {want:.4f} (tolerance {tolerance:.3f})")
            if gap < near_tie:
                continue
            compared += 1
            if entry.get("rank") != 1:
                failures.append(f"prompt {index}: teacher-forced step {step} ranks the reference token {token} "
                                f"{entry.get('rank')} (reference gap {gap:.3f})")
    return compared, round(worst, 4), failures


def echo_check(server, cases):
    """The longest prompt sent as token ids, its prompt log-probabilities echoed: vLLM must have
    scored exactly the tokens sent, through every prefill chunk (the seed fork's GLM AWQ users on
    sm89 saw prompt tokens corrupted), each with a finite log-probability. Returns (record, failures);
    the record's log-probabilities are compared across the serving modes of a group (same_text)."""
    longest = max(cases, key=lambda case: len(case["prompt"]))
    prompt = longest["prompt"]
    choice = server.post("/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0,
                                             "prompt_logprobs": 1, "return_token_ids": True})["choices"][0]
    failures = []
    echoed = choice.get("prompt_token_ids")
    if echoed != prompt:
        first = next((i for i, (a, b) in enumerate(zip(echoed or [], prompt)) if a != b), min(len(echoed or []), len(prompt)))
        failures.append(f"echoed prompt differs from the {len(prompt)} tokens sent at position {first}")
    logprobs = []
    for position, (token, entry) in enumerate(zip(prompt, choice.get("prompt_logprobs") or [])):
        if position == 0:
            continue  # nothing precedes the first token
        scored = (entry or {}).get(str(token))
        if scored is None or not math.isfinite(scored["logprob"]):
            failures.append(f"prompt position {position}: token {token} not scored finitely: {entry}")
            break
        logprobs.append(round(scored["logprob"], 4))
    if len(logprobs) != len(prompt) - 1 and not failures:
        failures.append(f"{len(logprobs) + 1} prompt log-probabilities for {len(prompt)} prompt tokens")
    record = {"prompt_tokens": len(prompt), "logprobs": logprobs,
              "bf16_drift": longest.get("prompt_bf16_drift", longest.get("bf16_drift", 0.0))}
    if "prompt_logprobs" in longest and not failures:
        record["max_diff"], record["mean_diff"], against = echo_against_reference(logprobs, longest)
        failures += against
    return record, failures


def echo_against_reference(logprobs, longest):
    """(largest difference, mean difference, failures) of vLLM's echoed prompt log-probabilities
    against the float32 reference's own (prompt_logprobs): the largest within LOGPROB_TOL plus twice
    the prompt's largest bf16 drift (as tolerances() allows), the mean within MEAN_TOL plus twice its
    mean drift. The largest drift over thousands of positions is a tail (tiny GLM-5.3: 6.8 nats, so
    the first bound is loose there); the mean is what a corrupted prompt moves."""
    want = longest["prompt_logprobs"]
    diffs = [abs(got - ref) for got, ref in zip(logprobs, want)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    mean = sum(diffs) / len(diffs)
    tolerance = LOGPROB_TOL + 2 * longest.get("prompt_bf16_drift", 0.0)
    failures = []
    if diffs[worst] > tolerance:
        failures.append(f"echoed prompt position {worst + 1}: log-probability {logprobs[worst]}, the reference's "
                        f"{want[worst]} (tolerance {tolerance:.3f}; {sum(d > tolerance for d in diffs)} positions over)")
    if "prompt_bf16_mean_drift" in longest:
        mean_tolerance = MEAN_TOL + 2 * longest["prompt_bf16_mean_drift"]
        if mean > mean_tolerance:
            failures.append(f"echoed prompt log-probabilities are {mean:.3f} from the reference's on average "
                            f"(tolerance {mean_tolerance:.3f})")
    return round(diffs[worst], 4), round(mean, 4), failures


def chat_burst(server):
    def one(i):
        return server.post("/v1/chat/completions", {"model": "m", "max_tokens": 16, "temperature": 0,
                                                    "messages": [{"role": "user", "content": f"count to {i}"}]})

    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(one, range(CONCURRENT)))
    return sum(1 for a in answers if a["choices"][0]["message"] is not None)


def timing(server, prompt):
    """(seconds to the first streamed token, decode tokens/s after it) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=server.left(240))
    body = {"model": "m", "prompt": prompt, "max_tokens": DECODE_TOKENS, "temperature": 0, "ignore_eos": True,
            "stream": True}
    began = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    first, chunks = None, 0
    for line in response:
        if line.startswith(b"data: ") and b"[DONE]" not in line:
            chunks += 1
            first = first or time.monotonic()
    end = time.monotonic()
    conn.close()
    return round(first - began, 4), round((DECODE_TOKENS - 1) / max(end - first, 1e-9), 1)


SOAK_ROUNDS = 32  # x 64 tokens: about 2,000 decode steps


def soak(server, prompt):
    """About 2,000 decode steps at batch sizes 1-8 inside and past the capture list: every request
    answered (no hang, no NCCL error); returns how many answers equal the first one's tokens
    (greedy, so a difference is a batch-dependent flip at a near tie, reported, not failed)."""
    first, same, total = None, 0, 0
    for round_ in range(SOAK_ROUNDS):
        batch = round_ % 8 + 1
        with concurrent.futures.ThreadPoolExecutor(batch) as pool:
            answers = list(pool.map(lambda _: server.post("/v1/completions", {
                "model": "m", "prompt": prompt, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}), range(batch)))
        for answer in answers:
            tokens = answer["choices"][0]["token_ids"]
            first = first or tokens
            same += tokens == first
            total += 1
    return {"requests": total, "same_as_first": same}


def acceptance(server):
    """Speculative decoding's accepted / drafted tokens so far (vLLM's /metrics), or None."""
    status, text = server.request("GET", "/metrics")
    if status != 200 or not isinstance(text, str):
        return None
    found = {}
    for line in text.splitlines():
        for name in ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"):
            if line.startswith(name):
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    drafted = found.get("vllm:spec_decode_num_draft_tokens_total")
    return round(found.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) / drafted, 4) if drafted else None


def route_counts(folder):
    total = {}
    for path in pathlib.Path(folder).glob("route-counts-*.json"):
        for site, calls in json.loads(path.read_text()).items():
            total[site] = total.get(site, 0) + calls
    return total


def server_env(args):
    """What the servers need beyond this environment: the built plugin and kernels, under Bazel."""
    env = {}
    if args.plugin_wheel:
        import zipfile

        folder = tempfile.mkdtemp(prefix="plugin-")
        zipfile.ZipFile(args.plugin_wheel).extractall(folder)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
    if args.kernels_dir:
        env["VLLM_BACKPORT_KERNELS_DIR"] = args.kernels_dir
        env["VLLM_BACKPORT_SM_TABLE"] = str(pathlib.Path(args.kernels_dir) / "sm_table.json")
    return env


def run_job(sm, case, args, emulate, out, first_ready, follows):
    """One server and its checks. first_ready is set once this checkpoint's first server is up (or
    has failed); a job that follows waits for it, so that the driver's JIT compilation of the
    PTX-only libraries that checkpoint loads (FlashAttention 2 on a newer GPU) happens once, into
    the shared CUDA_CACHE_PATH, instead of in every server at once."""
    if follows:
        first_ready.wait(max(0.0, args.deadline - time.monotonic()))
    if args.deadline - time.monotonic() < 90:
        result = {"sm": sm, "case": case.name, "checkpoint": case.checkpoint, "emulated": emulate, "passed": False,
                  "cut_short": True, "failures": ["not run: --time-limit reached"]}
        print(f"SKIP {sm} {case.name}: --time-limit reached", flush=True)
        (out / f"{sm}-{case.name}.json").write_text(json.dumps(result, indent=1) + "\n")  # the record lists it too
        return result
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"{sm}-{case.name}-", dir=args.workdir))
    result = {"sm": sm, "case": case.name, "checkpoint": case.checkpoint, "emulated": emulate, "failures": []}
    server = Server(case, sm, args.models, workdir, emulate, server_env(args), args.deadline)
    result["command"] = " ".join(server.command)
    try:
        try:
            result["ready_s"] = round(server.start(), 1)
        finally:
            first_ready.set()
        refs = json.loads(reference_file(args.references, case.checkpoint).read_text())
        new_tokens, refs = refs["new_tokens"], refs["cases"]
        result["greedy"], failures = greedy_check(server, refs, new_tokens)
        if all("tokens" in ref for ref in refs):
            result["failures"] += failures
            result["teacher_forced_steps"], result["logprob_max_diff"], forced = teacher_forced_check(server, refs)
            result["failures"] += forced
        if case.echo:
            result["echo"], failures = echo_check(server, refs)
            result["failures"] += failures
        result["chat_answered"] = chat_burst(server)
        if result["chat_answered"] != CONCURRENT:
            result["failures"].append(f"{result['chat_answered']} of {CONCURRENT} concurrent chats answered")
        result["ttft_s"], result["decode_tok_s"] = timing(server, refs[0]["prompt"])
        result["acceptance"] = acceptance(server)
        if case.gpus > 1:
            result["soak"] = soak(server, refs[0]["prompt"])
        result["mapped_libraries"] = server.mapped_libraries()
    except Exception as error:  # the job's record says what broke; the other jobs go on
        result["failures"].append(f"{type(error).__name__}: {error}")
        result["cut_short"] = isinstance(error, RunTimeLimit)
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    result["startup_line"] = next((l for l in log.splitlines() if "vllm_backport: target" in l), None)
    result["error_lines"] = error_lines(log)
    result["backends"] = sorted({line.split("] ", 1)[-1] for line in log.splitlines() if BACKEND_LINE.search(line)})
    result["route_counts"] = route_counts(server.counts)
    missing = [site for site in case.sites if not result["route_counts"].get(site)]
    if missing:
        result["failures"].append(f"route kernels that never ran: {', '.join(missing)}")
    result["passed"] = not result["failures"]
    (out / f"{sm}-{case.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{sm}-{case.name}.log").write_text("\n".join(log.splitlines()[-400:]) + "\n")
    print(f"{'PASS' if result['passed'] else 'FAIL'} {sm} {case.name} ready {result.get('ready_s')} s "
          f"{brief('; '.join(result['failures']))}", flush=True)
    archive(out, args.archive)
    return result


ERROR_LINE = re.compile(r"Error|error:|Traceback|fatal|Killed|internal compiler|LLVM ERROR|ptxas|Assertion")
# vLLM's INFO and WARNING lines may say "error" (a ulimit it could not raise) without being one.
NOT_AN_ERROR = re.compile(r"\b(INFO|WARNING|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d ")


def error_lines(log, limit=60):
    """The log's first lines that name an error, each with the line before it: the 400-line tail
    can be all compiler dump (Triton prints a failing kernel's whole PTX)."""
    lines = log.splitlines()
    picked = []
    for i, line in enumerate(lines):
        if (ERROR_LINE.search(line) and not NOT_AN_ERROR.search(line)
                and not line.lstrip().startswith((".", "//", "{", "}"))):
            picked += [lines[i - 1][:400]] if i else []
            picked.append(line[:400])
        if len(picked) >= limit:
            break
    return picked


def brief(text, head=300, tail=700):
    """The start and the end of a failure (a server's traceback ends its log tail)."""
    return text if len(text) <= head + tail else f"{text[:head]} [...] {text[-tail:]}"


_ARCHIVE_LOCK = threading.Lock()


def archive(folder, path):
    """Packs the records so far into path (atomically): a run stopped from outside keeps them."""
    if not path:
        return
    import tarfile

    with _ARCHIVE_LOCK:
        with tarfile.open(path + ".partial", "w:gz") as tar:
            tar.add(folder, arcname=".")
        os.replace(path + ".partial", path)


def same_text(results):
    """Cases of one group (per SM) must agree on every greedy token."""
    failures = []
    groups = {}
    for r in results:
        group = BY_NAME[r["case"]].same_text_as
        if group and "greedy" in r:
            groups.setdefault((r["sm"], group), []).append(r)
    for (sm, group), members in sorted(groups.items()):
        lead = members[0]
        for r in members[1:]:
            for index, (mine, theirs) in enumerate(zip(r["greedy"], lead["greedy"])):
                failure = parting(mine, theirs)
                if failure:
                    failures.append(f"{sm} {group}: {r['case']} and {lead['case']}, prompt {index}: {failure}")
        # The long prompt's echoed log-probabilities agree across serving modes, where the reference
        # has no scores of its own to hold each mode to (echo_against_reference). Two bf16 runs may
        # each sit the prompt's bf16 drift away from float32.
        echoes = {r["case"]: r["echo"] for r in members if r.get("echo") and "max_diff" not in r["echo"]}
        for name, echo in echoes.items():
            base = echoes[next(iter(echoes))]
            tolerance = LOGPROB_TOL + 2 * max(echo.get("bf16_drift", 0.0), base.get("bf16_drift", 0.0))
            worst = max((abs(a - b) for a, b in zip(echo["logprobs"], base["logprobs"])), default=0.0)
            if len(echo["logprobs"]) != len(base["logprobs"]) or worst > tolerance:
                failures.append(f"{sm} {group}: {name}'s prompt log-probabilities differ from {next(iter(echoes))}'s "
                                f"by {worst:.3f} (tolerance {tolerance:.3f})")
        # Drafting on several GPUs accepts what it accepts on one (the seed's users saw 0% under PP).
        single = [r["acceptance"] for r in members if BY_NAME[r["case"]].gpus == 1 and r.get("acceptance") is not None]
        for r in members:
            if BY_NAME[r["case"]].gpus > 1 and r.get("acceptance") is not None and single:
                if abs(r["acceptance"] - single[0]) > ACCEPTANCE_MARGIN:
                    failures.append(f"{sm} {group}: {r['case']} accepts {r['acceptance']} of drafted tokens, one GPU "
                                    f"{single[0]} (margin {ACCEPTANCE_MARGIN})")
    return failures


def parting(mine, theirs):
    """Why two serving modes' greedy tokens for one prompt disagree beyond bf16 noise, or None. Up to
    their first difference both saw the same context; there each mode's own top-two gap must be
    under NEAR_TIE (batch shapes and graphs may flip a near tie), widened by four times the prompt's
    bf16 drift (each mode's gap may sit twice the drift from float32's, on either side of it);
    after it the contexts differ."""
    a, b = mine["tokens"], theirs["tokens"]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None:
        return None if len(a) == len(b) else f"{len(a)} and {len(b)} tokens"
    gaps = [(g.get("gaps") or [None] * (first + 1))[first] for g in (mine, theirs)]
    near_tie = NEAR_TIE + 4 * max(mine.get("bf16_drift", 0.0), theirs.get("bf16_drift", 0.0))
    if any(gap is None or gap >= near_tie for gap in gaps):
        return f"token {first} is {a[first]} and {b[first]}, with own top-two gaps {gaps} (near tie: < {near_tie:g})"
    return None


def summarize(results, gpu, capability, group_failures):
    """summary.json: the run's counts and each job's outcome, what models/gpu_runs.py records. A job
    of a group whose cases disagree did not pass, whatever its own checks said."""
    failed_groups = {(f.split(" ", 2)[0], f.split(" ", 2)[1].rstrip(":")) for f in group_failures}
    jobs = [{"sm": r["sm"], "case": r["case"], "checkpoint": r["checkpoint"], "emulated": r["emulated"],
             "passed": r["passed"] and (r["sm"], BY_NAME[r["case"]].same_text_as) not in failed_groups,
             # whether its greedy text was checked against a float32 reference, or only across modes
             "reference": bool(r.get("greedy")) and all("agree" in g for g in r["greedy"]),
             "cut_short": bool(r.get("cut_short"))}
            for r in results]
    return {"gpu": gpu, "capability": capability, "jobs": len(jobs), "passed": sum(j["passed"] for j in jobs),
            "same_text_failures": group_failures, "job_results": jobs}


def requested_jobs(sms, case_names, job_specs, error):
    """(SM row, case) pairs: every case named (all without --case) on each --sm, then each SM:CASE
    --job not among them; error(message) on an unknown case or a malformed --job."""
    malformed = [spec for spec in job_specs if spec.count(":") != 1 or not spec.startswith("sm")]
    if malformed:
        error(f"--job takes SM:CASE, such as sm86:glm5_next_awq, not {', '.join(malformed)}")
    unknown = [name for name in (case_names or []) + [spec.partition(":")[2] for spec in job_specs] if name not in BY_NAME]
    if unknown:
        error(f"unknown case {', '.join(unknown)}; the cases are {', '.join(sorted(BY_NAME))}")
    if not sms and not job_specs:
        error("name the SM rows to run (--sm sm86) or single jobs (--job sm86:glm5_next_awq)")
    cases = [BY_NAME[name] for name in case_names] if case_names else CASES
    pairs = [(sm, case) for sm in sms for case in cases]
    for sm, _, name in (spec.partition(":") for spec in job_specs):
        if (sm, BY_NAME[name]) not in pairs:
            pairs.append((sm, BY_NAME[name]))
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sm", action="append", default=[], help="SM rows: every --case on each")
    parser.add_argument("--case", action="append", help="case names (default: all)")
    parser.add_argument("--job", action="append", default=[], metavar="SM:CASE",
                        help="one case on one SM row, besides the --sm x --case jobs (re-running a run's failures)")
    parser.add_argument("--models", required=True)
    parser.add_argument("--references", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=3600,
                        help="seconds for the whole run: jobs that could not finish in it are not started")
    parser.add_argument("--archive", help="also keep every record packed in this .tgz, updated after each job")
    parser.add_argument("--plugin-wheel", help="install this plugin wheel for the servers (Bazel runs)")
    parser.add_argument("--kernels-dir", help="the kernel libraries and sm_table.json (Bazel runs)")
    args = parser.parse_args(argv)
    args.deadline = time.monotonic() + args.time_limit
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    capability, gpu = gpu_capability()
    import torch

    gpus = torch.cuda.device_count()
    table_path = pathlib.Path(args.kernels_dir) / "sm_table.json" if args.kernels_dir else os.environ["VLLM_BACKPORT_SM_TABLE"]
    table = json.loads(pathlib.Path(table_path).read_text())
    jobs = []
    for sm, case in requested_jobs(args.sm, args.case, args.job, parser.error):
        want = table[sm]["capability"]
        if capability < want:
            sys.exit(f"gpu_serve: this GPU ({gpu}, sm{capability}) cannot run {sm}'s code")
        if case.gpus > gpus:
            print(f"SKIP {sm} {case.name}: needs {case.gpus} GPUs, this machine has {gpus}", flush=True)
        else:
            jobs.append((sm, case, capability > want))
    # The first job of each checkpoint starts first; the others of that checkpoint wait for its server.
    ready, leads = {}, []
    for _, case, _ in jobs:
        leads.append(case.checkpoint not in ready)
        ready.setdefault(case.checkpoint, threading.Event())
    jobs = [job for lead, job in sorted(zip(leads, jobs), key=lambda pair: not pair[0])]
    follows = [False] * len(ready) + [True] * (len(jobs) - len(ready))
    if any(emulate for _, _, emulate in jobs):
        # The warm-up fills the shared JIT cache that waiting for a checkpoint's first server was for.
        warm_flash_attention(jobs, args)
        follows = [False] * len(jobs)
    print(f"gpu_serve: {len(jobs)} jobs on {gpu} (sm{capability}), {args.parallel} at a time"
          + ("" if not any(follows) else f"; the first server of each of {len(ready)} checkpoints starts before the "
             "others of its checkpoint"), flush=True)
    lock = threading.Lock()
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        for result in pool.map(lambda job, after: run_job(job[0], job[1], args, job[2], out, ready[job[1].checkpoint],
                                                          after), jobs, follows):
            with lock:
                results.append(result)
    failures = same_text(results)
    summary = summarize(results, gpu, capability, failures)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    archive(out, args.archive)
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"gpu_serve: {summary['passed']}/{summary['jobs']} jobs passed; {len(failures)} group mismatches")
    return 0 if summary["passed"] == summary["jobs"] and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
