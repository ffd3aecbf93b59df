"""GradBench's score for ngrad next to GradBench's own tools, measured by GradBench's own evals.

Given a checkout of GradBench's repository (github.com/gradbench/gradbench), this script builds
its C++ reference (``make -C tools/manual``, which the evals' validators run), then runs each
chosen eval's program (``python/gradbench/gradbench/evals/<eval>/run.py``) once against each tool
that defines it: ngrad (``python -m ngrad bench gradbench-tool``, all twelve evals) and GradBench's
``pytorch``, ``jax`` and ``manual`` (C++) tools, each where its ``tools/<tool>/evals.txt`` lists
the eval. One eval and one tool run at a time.

It relays the JSON lines as GradBench's CLI (``gradbench run``) does, following the protocol of
GradBench's CONTRIBUTING.md: every message of the eval goes to the tool and the tool's response
back to the eval, each checked on the way (a response without an integer ``id``, a ``define`` or
``evaluate`` response without a boolean ``success``, a success with an ``error`` or without an
``output``, a timing that is not a name and a whole number of nanoseconds: outcome ``error``).
A tool that does not answer a message within ``--timeout`` seconds (600 by default, as GradBench's
CI) is stopped (outcome ``timeout``). GradBench's outcomes, first that applies: ``timeout``,
``error`` (also: the eval program exited with an error), ``undefined`` (a define failed),
``failure`` (an evaluate answered ``success: false``), ``invalid`` (the eval's validator rejected
an output), ``success``.

**GradBench's score** of a tool on an eval: for each workload (each ``evaluate`` message) the mean
of all its timed ``evaluate`` runs, the first included, summed over the workloads. The table shows
it per eval and tool with how many outputs the eval's validator accepted; the validator's message
for every rejected output is printed under it and kept in the JSON file (``--json``), with each
workload's runs.

Run from ngrad's checkout, in a Python environment with ngrad, ``rich`` and what the evals and
GradBench's Python tools import (numpy, scipy, pydantic, dataclasses-json; torch and jax for those
tools; ``--eval-python`` and ``--tool-python`` name other interpreters), after placing
nlohmann/json's single header at ``cpp/json.hpp`` in the GradBench checkout:

    python benchmarks/gradbench.py --repo ../gradbench --evals lse,gmm,particle \\
        --tools ngrad,jax,pytorch,manual --min-seconds 1 --json gradbench.json

Options: ``--min-runs N`` and ``--min-seconds S`` are passed to every eval that takes them (by
default each eval's own: one run and one second); ``--eval-args lstm="-c 1024"`` adds arguments to
one eval's program; ``--threads N`` (default 1) sets the thread count of every tool's numerical
libraries (OMP, MKL, OpenBLAS, Numba) as GradBench's single-threaded runs; ``--log-dir`` keeps the
raw message log of each run (GradBench's ``-o``).
"""

import argparse
import datetime
import json
import os
import select
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVALS = ("hello", "lse", "llsq", "ode", "lstm", "gmm", "kmeans", "ba", "ht", "det", "particle", "saddle")
TOOLS = ("ngrad", "jax", "pytorch", "manual")
NGRAD_ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = ("timeout", "error", "undefined", "failure", "invalid", "success")


class ProtocolError(Exception):
    """A message or response that breaks GradBench's protocol (GradBench's outcome ``error``)."""


# --- the protocol (GradBench's CONTRIBUTING.md, "Specification" and "Types") ---------------------------


def check_message(msg):
    """The eval's message: an object with an integer id and one of the four kinds."""
    if not isinstance(msg, dict) or type(msg.get("id")) is not int:
        raise ProtocolError(f"eval sent a message without an integer id: {str(msg)[:200]}")
    if msg.get("kind") not in ("start", "define", "evaluate", "analysis"):
        raise ProtocolError(f"eval sent a message of unknown kind {msg.get('kind')!r}")


def check_response(msg, resp):
    """The tool's response to ``msg``, as GradBench's intermediary checks it."""
    if not isinstance(resp, dict) or type(resp.get("id")) is not int:
        raise ProtocolError(f"tool answered without an integer id: {str(resp)[:200]}")
    if resp["id"] != msg["id"]:
        raise ProtocolError(f"tool answered message {msg['id']} with id {resp['id']}")
    if msg["kind"] not in ("define", "evaluate"):
        return
    if type(resp.get("success")) is not bool:
        raise ProtocolError(f"{msg['kind']} response without a boolean success: {str(resp)[:200]}")
    if resp["success"] and resp.get("error") is not None:
        raise ProtocolError(f"tool reported success but gave an error: {str(resp['error'])[:200]}")
    if msg["kind"] == "evaluate" and resp["success"] and "output" not in resp:
        raise ProtocolError("tool reported success but gave no output")
    for t in resp.get("timings") or []:
        ok = isinstance(t, dict) and isinstance(t.get("name"), str) and type(t.get("nanoseconds")) is int
        if not ok or t["nanoseconds"] < 0:
            raise ProtocolError(f"timing is not a name and a whole number of nanoseconds: {t}")


# --- the score, from the exchanged messages ---------------------------------------------------------------


def summarize(exchanges, ended=None):
    """GradBench's score and outcome of one run from its ``(message, response)`` pairs (response
    None when the tool gave none). ``ended``: ``"timeout"`` or ``"error: <why>"`` when the run
    stopped early. Returns ``score_ms`` (per workload the mean of its ``evaluate`` timings, summed),
    ``workloads`` (one dict per evaluate: function, description, runs, mean_ms, success, valid,
    error), ``valid``/``invalid``/``failed`` counts and ``outcome``.

    >>> ex = [({"id": 1, "kind": "define", "module": "m"}, {"id": 1, "success": True}),
    ...       ({"id": 2, "kind": "evaluate", "module": "m", "function": "f", "input": 1},
    ...        {"id": 2, "success": True, "output": 2,
    ...         "timings": [{"name": "evaluate", "nanoseconds": 3_000_000},
    ...                     {"name": "evaluate", "nanoseconds": 1_000_000}]}),
    ...       ({"id": 3, "kind": "analysis", "of": 2, "valid": True}, {"id": 3})]
    >>> s = summarize(ex)
    >>> s["score_ms"], s["valid"], s["outcome"]
    (2.0, 1, 'success')
    """
    workloads, by_id, undefined = [], {}, False
    for msg, resp in exchanges:
        if msg["kind"] == "define" and resp is not None and not resp.get("success"):
            undefined = True
        elif msg["kind"] == "evaluate" and resp is not None:
            runs = [t["nanoseconds"] for t in resp.get("timings") or [] if t.get("name") == "evaluate"]
            w = {
                "id": msg["id"],
                "function": msg.get("function"),
                "description": msg.get("description", ""),
                "runs": runs,
                "mean_ms": sum(runs) / len(runs) / 1e6 if runs else None,
                "success": bool(resp.get("success")),
                "valid": None,
                "error": None if resp.get("success") else str(resp.get("error", ""))[:2000],
            }
            workloads.append(w)
            by_id[msg["id"]] = w
        elif msg["kind"] == "analysis" and msg.get("of") in by_id:
            w = by_id[msg["of"]]
            w["valid"] = bool(msg.get("valid"))
            if not w["valid"]:
                w["error"] = str(msg.get("error") or "")[:2000]
    scored = [w["mean_ms"] for w in workloads if w["success"] and w["mean_ms"] is not None]
    valid = sum(w["valid"] is True for w in workloads)
    invalid = sum(w["valid"] is False for w in workloads)
    failed = sum(not w["success"] for w in workloads)
    if ended:
        outcome = "timeout" if ended == "timeout" else "error"
    else:
        outcome = "undefined" if undefined else "failure" if failed else "invalid" if invalid else "success"
    return {
        "outcome": outcome,
        "ended": ended,
        "score_ms": sum(scored),
        "workloads": workloads,
        "valid": valid,
        "invalid": invalid,
        "failed": failed,
    }


# --- the relay -----------------------------------------------------------------------------------------------


class _Lines:
    """Lines from a child's stdout, each read within a deadline (GradBench's response timeout)."""

    def __init__(self, stream):
        self.fd, self.buf = stream.fileno(), b""

    def read(self, timeout):
        """The next line (bytes, with its newline); b"" at the end; None past ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                line, self.buf = self.buf, b""
                return line
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


def _stop(proc):
    """Ends a child started here and its own children (its process group, made for it)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    proc.wait()


def _say(progress, text):
    if progress and text:
        progress(text)


def _exchange(ev, tool, lines, msg, line, timeout, log):
    """Sends one message to the tool and returns its response (None past the timeout)."""
    tool.stdin.write(line)
    tool.stdin.flush()
    answer = lines.read(timeout)
    if answer is None:
        return None
    if not answer:
        raise ProtocolError(f"tool ended without answering message {msg['id']}")
    try:
        resp = json.loads(answer)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"tool answered with a line that is not JSON ({e}): {answer[:200]!r}") from e
    check_response(msg, resp)
    if log:
        log.write(json.dumps({"response": resp}) + "\n")
    ev.stdin.write(answer)
    ev.stdin.flush()
    return resp


def _describe(msg, resp, elapsed):
    """One progress line per define and evaluate response, and per rejected output."""
    if msg["kind"] == "define":
        return f"  define {msg['module']}: {'ok' if resp.get('success') else 'undefined'} ({elapsed:.1f} s)"
    if msg["kind"] == "evaluate":
        runs = [t["nanoseconds"] for t in resp.get("timings") or [] if t.get("name") == "evaluate"]
        mean = f"{sum(runs) / len(runs) / 1e6:.2f} ms x{len(runs)}" if runs else "no timings"
        status = "" if resp.get("success") else f" FAILED: {str(resp.get('error'))[:300]}"
        return f"  {msg.get('function')} {msg.get('description', '')}: {mean} ({elapsed:.1f} s){status}"
    if msg["kind"] == "analysis" and not msg.get("valid"):
        return f"  INVALID output of message {msg.get('of')}: {str(msg.get('error'))[:300]}"
    return None


def relay(eval_cmd, tool_cmd, *, cwd, eval_env=None, tool_env=None, timeout=600.0, log=None, progress=None):
    """Runs ``eval_cmd`` and ``tool_cmd`` (argument lists) in ``cwd`` and relays their lines until
    the eval ends; each response must come within ``timeout`` seconds. Returns ``summarize``'s
    dict plus ``seconds`` (wall time) and ``eval_stderr`` (its tail, when the eval failed)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as ev_err, tempfile.TemporaryFile() as tool_err:
        ev = subprocess.Popen(
            eval_cmd, cwd=cwd, env=eval_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=ev_err,
            start_new_session=True,
        )  # fmt: skip
        tool = subprocess.Popen(
            tool_cmd, cwd=cwd, env=tool_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=tool_err,
            start_new_session=True,
        )  # fmt: skip
        exchanges, ended, lines = [], None, _Lines(tool.stdout)
        try:
            while True:
                line = ev.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                check_message(msg)
                if log:
                    log.write(json.dumps({"message": msg}) + "\n")
                sent = time.monotonic()
                resp = _exchange(ev, tool, lines, msg, line, timeout, log)
                exchanges.append((msg, resp))
                if resp is None:
                    ended = "timeout"
                    _say(progress, f"  {msg.get('function', msg['kind'])} {msg.get('description', '')}: "
                                   f"no response within {timeout:g} s")  # fmt: skip
                    break
                _say(progress, _describe(msg, resp, time.monotonic() - sent))
        except (ProtocolError, json.JSONDecodeError, BrokenPipeError) as e:
            ended = f"error: {e}"
            _say(progress, f"  protocol error: {e}")
        for proc in (ev, tool):
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
        if ended:
            _stop(tool)
        try:  # both end when their stdin does; a minute's grace, then they are stopped
            ev.wait(timeout=60)
            tool.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        _stop(ev)
        _stop(tool)
        out = summarize(exchanges, ended)
        if ev.returncode and not ended:
            ev_err.seek(0)
            out["outcome"] = "error"
            out["ended"] = f"error: the eval exited with status {ev.returncode}"
            out["eval_stderr"] = ev_err.read()[-3000:].decode(errors="replace")
        if out["outcome"] in ("error", "timeout", "undefined", "failure"):
            tool_err.seek(0)
            out["tool_stderr"] = tool_err.read()[-3000:].decode(errors="replace")
    out["seconds"] = time.monotonic() - t0
    return out


# --- GradBench's checkout: its reference, its evals and its tools ---------------------------------------------


def defined_evals(repo, tool):
    """The evals ``tool`` lists in its ``evals.txt`` (all twelve for ngrad), each with the outcome
    GradBench expects of it there (``None``: success)."""
    if tool == "ngrad":
        return dict.fromkeys(EVALS)
    out = {}
    for line in (Path(repo) / "tools" / tool / "evals.txt").read_text().splitlines():
        words = line.split()
        if words:
            out[words[0]] = words[1] if len(words) > 1 else None
    return out


def build_reference(repo, evals, progress=print):
    """Builds GradBench's C++ reference (``tools/manual/bin/<eval>``), which the evals' validators
    run; a clear error when nlohmann/json's header is not at ``cpp/json.hpp``."""
    repo = Path(repo)
    if not (repo / "cpp" / "json.hpp").exists():
        raise SystemExit(
            f"GradBench's C++ reference needs nlohmann/json's single header at {repo / 'cpp' / 'json.hpp'}: "
            "install it (e.g. apt-get install nlohmann-json3-dev) and link /usr/include/nlohmann/json.hpp "
            "there, or run `make -C cpp` in the checkout to download it"
        )
    targets = [f"bin/{e}" for e in evals if e in defined_evals(repo, "manual")]
    if not targets:
        return
    progress(f"building GradBench's C++ reference: make -C tools/manual {' '.join(targets)}")
    proc = subprocess.run(["make", "-C", "tools/manual", *targets], cwd=repo, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"building GradBench's C++ reference failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def eval_command(repo, name, python, min_runs=None, min_seconds=None, extra=""):
    """The argument list that runs eval ``name``'s program, with the options it accepts."""
    script = Path(repo) / "python" / "gradbench" / "gradbench" / "evals" / name / "run.py"
    if not script.exists():
        raise SystemExit(f"{script} not found: is {repo} a checkout of GradBench?")
    source = script.read_text()
    cmd = [python, str(script.relative_to(repo))]
    if min_runs is not None and "--min-runs" in source:
        cmd += ["--min-runs", str(min_runs)]
    if min_seconds is not None and "--min-seconds" in source:
        cmd += ["--min-seconds", str(min_seconds)]
    return cmd + shlex.split(extra)


def tool_command(tool, python):
    """The argument list that starts ``tool`` (run in the checkout's root); ngrad's runs on this
    script's interpreter, whatever ``python`` is."""
    if tool == "ngrad":
        return [sys.executable, "-m", "ngrad", "bench", "gradbench-tool"]
    if tool == "manual":
        return [python, "python/gradbench/gradbench/cpp.py", "manual"]
    return [python, f"python/gradbench/gradbench/tools/{tool}/run.py"]


def environment(repo, threads):
    """The children's environment: GradBench's Python package and ngrad importable, and every
    numerical library on ``threads`` threads."""
    env = dict(os.environ)
    paths = [str(Path(repo).resolve() / "python" / "gradbench"), str(NGRAD_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[var] = str(threads)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    return env


# --- the table ------------------------------------------------------------------------------------------------


def _cell(result):
    if result is None:
        return "no tool"
    n = len(result["workloads"])
    score = f"{result['score_ms']:,.1f}" if result["score_ms"] >= 1 else f"{result['score_ms']:.3f}"
    if result["outcome"] == "success":
        return f"{score}\n{result['valid']}/{n} valid"
    parts = [result["outcome"]]
    if result["workloads"]:
        parts.append(f"{score} over {n}")
        parts.append(f"{result['valid']} valid, {result['invalid']} invalid, {result['failed']} failed")
    return "\n".join(parts)


def render(results, tools):
    """Prints the score table (ms; per eval and tool) and every rejected or failed output."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GradBench's score (ms: per workload the mean of its evaluate runs, summed)")
    table.add_column("eval")
    for tool in tools:
        table.add_column(tool, justify="right")
    for name, by_tool in results.items():
        table.add_row(name, *[_cell(by_tool.get(tool)) for tool in tools])
    console = Console(width=None if sys.stdout.isatty() else 160)  # a log file: no wrapping at 80
    console.print(table)
    for name, by_tool in results.items():
        for tool, r in by_tool.items():
            if r is None:
                continue
            for w in r["workloads"]:
                if w["valid"] is False or not w["success"]:
                    what = "invalid" if w["success"] else "failed"
                    console.print(f"{name} / {tool}: {w['function']} {w['description']} {what}: {w['error']}")
            if r.get("ended"):
                console.print(f"{name} / {tool}: {r['ended']}")


def _parse_eval_args(items):
    out = {}
    for item in items or []:
        name, sep, args = item.partition("=")
        if not sep or name not in EVALS:
            raise SystemExit(f"--eval-args takes EVAL=ARGS with EVAL one of {', '.join(EVALS)}: {item!r}")
        out[name] = args
    return out


def _names(text, allowed, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="a checkout of GradBench's repository")
    ap.add_argument("--evals", default=",".join(EVALS), help="comma-separated (default: all twelve)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per response (default 600)")
    ap.add_argument("--min-runs", type=int, help="passed to each eval (default: the eval's own)")
    ap.add_argument("--min-seconds", type=float, help="passed to each eval (default: the eval's own)")
    ap.add_argument("--eval-args", action="append", metavar="EVAL=ARGS", help="more arguments for one eval")
    ap.add_argument("--threads", type=int, default=1, help="threads of each tool's libraries (0: leave)")
    ap.add_argument("--eval-python", default=sys.executable, help="the interpreter of the evals")
    ap.add_argument("--tool-python", default=sys.executable, help="the interpreter of jax's and pytorch's tools")
    ap.add_argument("--json", default="gradbench-score.json", help="where to write the results")
    ap.add_argument("--log-dir", help="keep each run's message log here")
    args = ap.parse_args(argv)
    repo = Path(args.repo).resolve()
    evals, tools = _names(args.evals, EVALS, "eval"), _names(args.tools, TOOLS, "tool")
    extra = _parse_eval_args(args.eval_args)
    build_reference(repo, evals)
    env = environment(repo, args.threads)
    defined = {tool: defined_evals(repo, tool) for tool in tools}
    results, started = {}, datetime.datetime.now(datetime.UTC)
    for name in evals:
        results[name] = {}
        ev_cmd = eval_command(repo, name, args.eval_python, args.min_runs, args.min_seconds, extra.get(name, ""))
        for tool in tools:
            if name not in defined[tool]:
                results[name][tool] = None
                continue
            print(f"{name} with {tool} (load average {os.getloadavg()[0]:.1f}):", flush=True)
            log = None
            if args.log_dir:
                Path(args.log_dir).mkdir(parents=True, exist_ok=True)
                log = open(Path(args.log_dir) / f"{name}-{tool}.jsonl", "w")  # noqa: SIM115
            try:
                r = relay(ev_cmd, tool_command(tool, args.tool_python), cwd=repo, eval_env=env, tool_env=env,
                          timeout=args.timeout, log=log, progress=lambda s: print(s, flush=True))  # fmt: skip
            finally:
                if log:
                    log.close()
            r["expected"] = defined[tool][name]
            results[name][tool] = r
            print(f"  -> {r['outcome']}, score {r['score_ms']:,.1f} ms, {r['seconds']:.0f} s", flush=True)
            _write(args, results, started)
    render(results, tools)
    _write(args, results, started)
    return 0


def _write(args, results, started):
    meta = {
        "started": started.isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "args": vars(args),
    }
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
